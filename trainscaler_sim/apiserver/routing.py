"""Parsing request paths into API targets, and the verb/resource names counted."""

from __future__ import annotations

from dataclasses import dataclass

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


@dataclass(frozen=True)
class ResourceTarget:
    """/api(s)/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    legacy_watch: bool

    @property
    def counted_resource(self) -> str:
        return self.plural if self.subresource is None else f"{self.plural}/{self.subresource}"


@dataclass(frozen=True)
class DiscoveryTarget:
    """/api, /apis, /apis/<group>, /api/v1, /apis/<group>/<version>."""

    group: str | None
    version: str | None
    core: bool


def parse_path(path: str) -> ResourceTarget | DiscoveryTarget | None:
    parts = [part for part in path.split("/") if part]
    if not parts or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        if len(parts) == 1:
            return DiscoveryTarget(None, None, core=True)
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) == 1:
            return DiscoveryTarget(None, None, core=False)
        if len(parts) == 2:
            return DiscoveryTarget(parts[1], None, core=False)
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return DiscoveryTarget(group, version, core=not group)
    legacy_watch = rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    namespace: str | None = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES)
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    return ResourceTarget(
        group=group,
        version=version,
        plural=rest[0],
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource=rest[2] if len(rest) > 2 else None,
        legacy_watch=legacy_watch,
    )


def verb_of(method: str, target: ResourceTarget, *, watch: bool) -> str:
    """The Kubernetes verb: list/get/watch/create/update/patch/delete/deletecollection."""
    if method == "GET":
        if target.name is None:
            return "watch" if watch or target.legacy_watch else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name is not None else "deletecollection"
    return method.lower()
