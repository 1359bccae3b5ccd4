"""``ClusterReader`` over the list-and-watch cache: EDL's ``InquiryResource`` and the jobs.

Both reads plan from the cache's snapshots and make no LIST call. The only
request a read may make is a GET of ``/scale`` for a custom-resource target
(its kind is not cached: the ClusterRole cannot watch arbitrary kinds).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from scheduler_core.accounting import inquire
from scheduler_core.models import ClusterResource, ElasticJob
from workers.adapters.kubernetes.cache import ClusterCache
from workers.adapters.kubernetes.client import JsonObject, KubeApiError, KubeClient
from workers.adapters.kubernetes.jobs import (
    ScaleTargetView,
    elastic_job,
    namespace_and_name,
    pods_of,
    scale_target_ref,
    view_of_scale,
    view_of_workload,
)
from workers.adapters.kubernetes.kinds import (
    ELASTICJOBS,
    JOBS,
    NODES,
    PODS,
    KindResolver,
)

log = logging.getLogger(__name__)


class KubeClusterReader:
    """Implements ``scheduler_core.ports.ClusterReader`` from a ``ClusterCache``."""

    def __init__(
        self,
        cache: ClusterCache,
        client: KubeClient,
        *,
        gpu_resource: str,
        sync_timeout: float = 30.0,
        resolver: KindResolver | None = None,
        default_policy: str = "edl",
    ) -> None:
        self._default_policy = default_policy
        self._cache = cache
        self._client = client
        self._gpu_resource = gpu_resource
        self._sync_timeout = sync_timeout
        self._resolver = resolver or KindResolver(lambda path: client.request("GET", path))

    def inquire(self) -> ClusterResource:
        self._cache.ensure_synced(self._sync_timeout)
        return inquire(
            self._cache.informer(NODES).list(),
            self._cache.informer(PODS).list(),
            gpu_resource=self._gpu_resource,
        )

    def elastic_jobs(self) -> Sequence[ElasticJob]:
        self._cache.ensure_synced(self._sync_timeout)
        pods_by_namespace: dict[str, list[JsonObject]] = defaultdict(list)
        for pod in self._cache.informer(PODS).list():
            namespace, _ = namespace_and_name(pod)
            pods_by_namespace[namespace].append(pod)
        found: list[ElasticJob] = []
        resources = sorted(self._cache.informer(ELASTICJOBS).list(), key=namespace_and_name)
        for resource in resources:
            namespace, name = namespace_and_name(resource)
            target = self._target_view(resource)
            if target is None:
                continue
            target_pods = pods_of(target, namespace, pods_by_namespace.get(namespace, []))
            try:
                found.append(
                    elastic_job(
                        resource,
                        target,
                        target_pods,
                        gpu_resource=self._gpu_resource,
                        default_policy=self._default_policy,
                    )
                )
            except ValueError as error:
                log.warning("ElasticJob %s/%s skipped: %s", namespace, name, error)
        return found

    def _target_view(self, resource: JsonObject) -> ScaleTargetView | None:
        """The job's scale target from the cache (or its /scale for a CR); None if absent."""
        namespace, name = namespace_and_name(resource)
        ref = scale_target_ref(resource)
        if not (ref.api_version and ref.kind and ref.name):
            log.warning("ElasticJob %s/%s has an incomplete scaleTargetRef", namespace, name)
            return None
        kind = self._resolver.resolve(ref.api_version, ref.kind)
        if self._cache.has(kind):
            workload = self._cache.informer(kind).get(namespace, ref.name)
            if workload is None:
                log.info(
                    "ElasticJob %s/%s: target %s %s not found", namespace, name, ref.kind, ref.name
                )
                return None
            return view_of_workload(workload, batch_job=kind == JOBS)
        try:
            scale = self._client.request("GET", kind.object_path(namespace, ref.name, "scale"))
        except KubeApiError as error:
            if error.status in (403, 404):
                log.info(
                    "ElasticJob %s/%s: no /scale for %s %s (%s)",
                    namespace,
                    name,
                    ref.kind,
                    ref.name,
                    error,
                )
                return None
            raise
        return view_of_scale(scale)
