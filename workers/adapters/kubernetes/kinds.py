"""The API resources the adapter touches, and their REST paths.

One ``ResourceKind`` per (group, version, plural); the built-in scale targets
are listed here so a ``scaleTargetRef`` (``apiVersion`` + ``kind``) resolves
without a discovery call. Other kinds (a custom resource with a ``/scale``
subresource) resolve through ``resolve_kind`` with a discovery lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.adapters.kubernetes.crd import GROUP, KIND, PLURAL, VERSION


@dataclass(frozen=True)
class ResourceKind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None = None) -> str:
        """The list/watch/create path, for one namespace or all of them."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def object_path(self, namespace: str, name: str, *, subresource: str | None = None) -> str:
        path = f"{self.collection_path(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


NODES = ResourceKind("", "v1", "nodes", "Node", namespaced=False)
PODS = ResourceKind("", "v1", "pods", "Pod")
EVENTS = ResourceKind("", "v1", "events", "Event")
DEPLOYMENTS = ResourceKind("apps", "v1", "deployments", "Deployment")
STATEFULSETS = ResourceKind("apps", "v1", "statefulsets", "StatefulSet")
REPLICASETS = ResourceKind("apps", "v1", "replicasets", "ReplicaSet")
JOBS = ResourceKind("batch", "v1", "jobs", "Job")
ELASTICJOBS = ResourceKind(GROUP, VERSION, PLURAL, KIND)

# Scale targets the cache watches (their pod templates give per-replica resources).
WATCHED_TARGETS: tuple[ResourceKind, ...] = (DEPLOYMENTS, STATEFULSETS, REPLICASETS, JOBS)

_BY_API_VERSION_AND_KIND = {(k.api_version, k.kind): k for k in WATCHED_TARGETS}


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def builtin_kind(api_version: str, kind: str) -> ResourceKind | None:
    return _BY_API_VERSION_AND_KIND.get((api_version, kind))


def resolve_kind(
    api_version: str,
    kind: str,
    *,
    discover_plural: Callable[[str, str], str | None],
) -> ResourceKind:
    """The resource of a scale target; ``discover_plural(api_version, kind)`` for CRs.

    Falls back to Kubernetes' default plural (lower-case kind + ``s``) when
    discovery does not know the kind.
    """
    known = builtin_kind(api_version, kind)
    if known is not None:
        return known
    group, version = split_api_version(api_version)
    plural = discover_plural(api_version, kind) or f"{kind.lower()}s"
    return ResourceKind(group, version, plural, kind)


class KindResolver:
    """``resolve_kind`` with API discovery, each group/version asked once.

    ``fetch(path)`` returns the decoded discovery document or raises; any
    error means "unknown here" and the default plural is used.
    """

    def __init__(self, fetch: Callable[[str], Mapping[str, Any]]) -> None:
        self._fetch = fetch
        self._plurals: dict[tuple[str, str], str | None] = {}
        self._lock = threading.Lock()

    def _discover(self, api_version: str, kind: str) -> str | None:
        with self._lock:
            if (api_version, kind) in self._plurals:
                return self._plurals[(api_version, kind)]
        group, version = split_api_version(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        plural: str | None = None
        try:
            document = self._fetch(path)
        except Exception:
            # Discovery is an optimisation (the default plural still works);
            # not remembered, so a passing outage is asked again next time.
            return None
        for resource in document.get("resources") or []:
            name = str(resource.get("name") or "")
            if resource.get("kind") == kind and "/" not in name:
                plural = name
                break
        with self._lock:
            self._plurals[(api_version, kind)] = plural
        return plural

    def resolve(self, api_version: str, kind: str) -> ResourceKind:
        return resolve_kind(api_version, kind, discover_plural=self._discover)
