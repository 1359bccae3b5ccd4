"""The resource types the server serves: built-ins plus those CRDs declare.

A ``ResourceType`` names one (group, version, plural) endpoint; ``storage``
names the backing collection in the store, so that core/v1 and
events.k8s.io/v1 events share one collection, and every served version of a
CRD shares its storage.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .errors import ApiError, invalid
from .json_types import JsonObject

COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
STANDARD_VERBS = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class ScalePaths:
    """Where a resource keeps the values ``autoscaling/v1`` Scale exposes."""

    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    # None: the selector is rendered from ``spec.selector`` (the built-in kinds).
    label_selector: str | None = None


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    scale: ScalePaths | None = None
    short_names: tuple[str, ...] = ()
    custom: bool = False
    extra_fields: frozenset[str] = field(default_factory=frozenset)
    storage_name: str = ""
    # Discovery categories: ``kubectl get all`` lists the kinds in "all".
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def group_resource(self) -> str:
        """``pods`` or ``deployments.apps``, as error messages name resources."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    @property
    def storage(self) -> str:
        return self.storage_name or self.group_resource

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def field_labels(self) -> frozenset[str]:
        return COMMON_FIELDS | self.extra_fields


_POD_FIELDS = frozenset(
    {
        "status.phase",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.podIP",
        "status.nominatedNodeName",
        "spec.hostNetwork",
    }
)
_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)
_APPS_SCALE = ScalePaths()

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        has_status=True,
        short_names=("ns",),
        extra_fields=frozenset({"status.phase"}),
    ),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        has_status=True,
        short_names=("no",),
        extra_fields=frozenset({"spec.unschedulable"}),
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        has_status=True,
        short_names=("po",),
        extra_fields=_POD_FIELDS,
    ),
    ResourceType(
        "", "v1", "events", "Event", True, short_names=("ev",), extra_fields=_EVENT_FIELDS
    ),
    ResourceType("", "v1", "services", "Service", True, has_status=True, short_names=("svc",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True, extra_fields=frozenset({"type"})),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        has_status=True,
        scale=_APPS_SCALE,
        short_names=("deploy",),
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        has_status=True,
        scale=_APPS_SCALE,
        short_names=("sts",),
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        has_status=True,
        scale=_APPS_SCALE,
        short_names=("rs",),
        extra_fields=frozenset({"status.replicas"}),
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        has_status=True,
        extra_fields=frozenset({"status.successful"}),
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        storage_name="events",
        extra_fields=frozenset({"reason", "type"}),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "autoscaling",
        "v1",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        has_status=True,
        short_names=("hpa",),
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        has_status=True,
        short_names=("crd",),
    ),
)


@dataclass(frozen=True)
class ObjectRef:
    """One object of a served resource type: what GET/PUT/PATCH/DELETE address."""

    resource_type: ResourceType
    namespace: str
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


def types_from_crd(crd: JsonObject) -> list[ResourceType]:
    """The served versions a CustomResourceDefinition declares; 422 when malformed."""
    name = str((crd.get("metadata") or {}).get("name", ""))
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not group or not plural or not kind:
        raise invalid(
            "CustomResourceDefinition",
            name,
            cause="spec.group, spec.names.plural and spec.names.kind are required",
        )
    if name != f"{plural}.{group}":
        raise invalid(
            "CustomResourceDefinition",
            name,
            cause=f'metadata.name: Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
        )
    scope = spec.get("scope", "Namespaced")
    if scope not in ("Namespaced", "Cluster"):
        raise invalid(
            "CustomResourceDefinition", name, cause="spec.scope must be Namespaced or Cluster"
        )
    versions = spec.get("versions") or []
    if not versions:
        raise invalid("CustomResourceDefinition", name, cause="spec.versions must have an entry")
    types = []
    for version in versions:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        scale_spec = subresources.get("scale")
        scale = None
        if isinstance(scale_spec, dict):
            scale = ScalePaths(
                spec_replicas=str(scale_spec.get("specReplicasPath", ".spec.replicas")),
                status_replicas=str(scale_spec.get("statusReplicasPath", ".status.replicas")),
                label_selector=str(scale_spec.get("labelSelectorPath") or "") or None,
            )
        types.append(
            ResourceType(
                group=str(group),
                version=str(version.get("name")),
                plural=str(plural),
                kind=str(kind),
                namespaced=scope == "Namespaced",
                has_status="status" in subresources,
                scale=scale,
                short_names=tuple(names.get("shortNames") or ()),
                custom=True,
                storage_name=f"{plural}.{group}",
                categories=tuple(names.get("categories") or ()),
            )
        )
    return types


class ResourceRegistry:
    """Lookup of served resource types; CRD types come and go at run time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str, str], ResourceType] = {
            (t.group, t.version, t.plural): t for t in BUILTIN_TYPES
        }

    def lookup(self, group: str, version: str, *, plural: str) -> ResourceType:
        with self._lock:
            found = self._types.get((group, version, plural))
        if found is None:
            gv = version if not group else f"{group}/{version}"
            raise ApiError(404, f"the server could not find the requested resource ({gv} {plural})")
        return found

    def get(self, group: str, version: str, *, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def all_types(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def namespaced_storages(self) -> list[ResourceType]:
        """One type per namespaced storage (the first registered), for namespace cleanup."""
        chosen: dict[str, ResourceType] = {}
        with self._lock:
            for resource_type in self._types.values():
                if resource_type.namespaced:
                    chosen.setdefault(resource_type.storage, resource_type)
        return list(chosen.values())

    def register(self, types: list[ResourceType]) -> None:
        with self._lock:
            for resource_type in types:
                key = (resource_type.group, resource_type.version, resource_type.plural)
                self._types[key] = resource_type

    def unregister_storage(self, storage: str) -> None:
        with self._lock:
            for key in [k for k, t in self._types.items() if t.custom and t.storage == storage]:
                del self._types[key]

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, for discovery (core group under "")."""
        result: dict[str, list[str]] = {}
        with self._lock:
            for resource_type in self._types.values():
                versions = result.setdefault(resource_type.group, [])
                if resource_type.version not in versions:
                    versions.append(resource_type.version)
        return result

    def types_in(self, group: str, version: str) -> list[ResourceType]:
        with self._lock:
            return [
                t for (g, v, _), t in sorted(self._types.items()) if g == group and v == version
            ]
