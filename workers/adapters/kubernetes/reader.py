"""``ClusterReader`` over the list-and-watch cache: EDL's ``InquiryResource`` and the jobs.

Both reads plan from the cache and make no LIST call. The cluster snapshot
is the cache's ``ClusterIndex`` ledger, kept from watch events (no pod is
recounted); each job's target pods come from the index's label buckets, and
a job whose resource, target and pods are the very objects of the last read
is not converted again. A round is O(jobs + nodes), not O(pods). The only
request a read may make is a GET of ``/scale`` for a custom-resource target
(its kind is not cached: the ClusterRole cannot watch arbitrary kinds).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler_core.models import ClusterResource, ElasticJob
from workers.adapters.kubernetes.cache import ClusterCache
from workers.adapters.kubernetes.client import JsonObject, KubeApiError, KubeClient
from workers.adapters.kubernetes.jobs import (
    ScaleTargetView,
    TargetPods,
    elastic_job_of,
    namespace_and_name,
    scale_target_ref,
    view_of_scale,
    view_of_workload,
)
from workers.adapters.kubernetes.kinds import ELASTICJOBS, JOBS, KindResolver

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Converted:
    """One job as last converted, and the objects it was converted from."""

    resource: JsonObject
    target: ScaleTargetView
    pods: TargetPods
    job: ElasticJob


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
        # Replaced whole on each read (a job or target gone is forgotten).
        self._converted: dict[tuple[str, str], _Converted] = {}
        self._views: dict[tuple[str, str, str], tuple[JsonObject, ScaleTargetView]] = {}

    def inquire(self) -> ClusterResource:
        self._cache.ensure_synced(self._sync_timeout)
        return self._cache.index.snapshot()

    def elastic_jobs(self) -> Sequence[ElasticJob]:
        self._cache.ensure_synced(self._sync_timeout)
        resources = sorted(self._cache.informer(ELASTICJOBS).list(), key=namespace_and_name)
        views: dict[tuple[str, str, str], tuple[JsonObject, ScaleTargetView]] = {}
        targets: list[tuple[JsonObject, ScaleTargetView]] = []
        for resource in resources:
            target = self._target_view(resource, views)
            if target is not None:
                targets.append((resource, target))
        self._views = views
        pods_of_each = self._cache.index.pods_of_each(
            [(namespace_and_name(resource)[0], target.selector) for resource, target in targets]
        )
        converted: dict[tuple[str, str], _Converted] = {}
        found: list[ElasticJob] = []
        for (resource, target), pods in zip(targets, pods_of_each, strict=True):
            key = namespace_and_name(resource)
            known = self._converted.get(key)
            if not (
                known is not None
                and known.resource is resource
                and known.target is target
                and known.pods.same_as(pods)
            ):
                try:
                    job = elastic_job_of(
                        resource,
                        target,
                        pods=pods,
                        gpu_resource=self._gpu_resource,
                        default_policy=self._default_policy,
                    )
                except ValueError as error:
                    log.warning("ElasticJob %s/%s skipped: %s", *key, error)
                    continue
                known = _Converted(resource=resource, target=target, pods=pods, job=job)
            converted[key] = known
            found.append(known.job)
        self._converted = converted
        return found

    def _target_view(
        self,
        resource: JsonObject,
        views: dict[tuple[str, str, str], tuple[JsonObject, ScaleTargetView]],
    ) -> ScaleTargetView | None:
        """The job's scale target from the cache (or its /scale for a CR); None if absent.

        A cached workload that is the very object of the last read keeps its view
        (recorded in ``views``).
        """
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
            place = (kind.plural, namespace, ref.name)
            known = self._views.get(place)
            view = (
                known[1]
                if known is not None and known[0] is workload
                else view_of_workload(workload, batch_job=kind == JOBS)
            )
            views[place] = (workload, view)
            return view
        try:
            scale = self._client.request(
                "GET", kind.object_path(namespace, ref.name, subresource="scale")
            )
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
