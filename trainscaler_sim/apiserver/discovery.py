"""Discovery documents (/api, /apis, /api/v1, /apis/<group>/<version>) and /version."""

from __future__ import annotations

from .json_types import JsonObject
from .resources import STANDARD_VERBS, ResourceRegistry, ResourceType

_STATUS_VERBS = ["get", "patch", "update"]
# The built-in kinds kube puts in the "all" category (of those served here).
_ALL_CATEGORY: dict[tuple[str, str], tuple[str, ...]] = {
    (group, plural): ("all",)
    for group, plural in (
        ("", "pods"),
        ("", "services"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("batch", "jobs"),
        ("autoscaling", "horizontalpodautoscalers"),
    )
}
VERSION_INFO: JsonObject = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-loopback",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def core_versions(server_address: str) -> JsonObject:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(name: str, versions: list[str]) -> JsonObject:
    entries = [{"groupVersion": f"{name}/{version}", "version": version} for version in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def group_list(registry: ResourceRegistry) -> JsonObject:
    groups = registry.groups()
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, groups[name]) for name in sorted(groups) if name],
    }


def group(registry: ResourceRegistry, name: str) -> JsonObject | None:
    versions = registry.groups().get(name)
    return _group(name, versions) if versions and name else None


def _entries(resource_type: ResourceType) -> list[JsonObject]:
    main: JsonObject = {
        "name": resource_type.plural,
        "singularName": resource_type.singular,
        "namespaced": resource_type.namespaced,
        "kind": resource_type.kind,
        "verbs": list(STANDARD_VERBS),
    }
    if resource_type.short_names:
        main["shortNames"] = list(resource_type.short_names)
    categories = resource_type.categories or _ALL_CATEGORY.get(
        (resource_type.group, resource_type.plural), ()
    )
    if categories:
        main["categories"] = list(categories)
    entries = [main]
    if resource_type.has_status:
        entries.append(
            {
                "name": f"{resource_type.plural}/status",
                "singularName": "",
                "namespaced": resource_type.namespaced,
                "kind": resource_type.kind,
                "verbs": _STATUS_VERBS,
            }
        )
    if resource_type.scale is not None:
        entries.append(
            {
                "name": f"{resource_type.plural}/scale",
                "singularName": "",
                "namespaced": resource_type.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": _STATUS_VERBS,
            }
        )
    if resource_type.kind == "Pod" and not resource_type.group:
        entries.append(
            {
                "name": "pods/binding",
                "singularName": "",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    return entries


def resource_list(
    registry: ResourceRegistry, group_name: str, *, version: str
) -> JsonObject | None:
    types = registry.types_in(group_name, version)
    if not types:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": version if not group_name else f"{group_name}/{version}",
        "resources": [entry for t in types for entry in _entries(t)],
    }
