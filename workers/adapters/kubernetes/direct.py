"""``ClusterReader`` without a cache, for every process but the planner.

Event workers (``submit``, ``schedule``) and the HTTP API need to know which
ElasticJobs exist and which policy drives each; they must not open watch
streams or hold the cluster in memory (only the planner does, issue 16), so
each read here is a handful of paged LISTs, answered and forgotten:

- ``elastic_jobs``: the ElasticJobs in scope, plus one LIST per built-in
  target kind they reference (per-replica requests from its pod template);
  a custom-resource target costs a GET of its ``/scale``. Pods are not read,
  so ``all_pods_unschedulable`` is always False here (only the planner plans).
- ``has_elastic_job``: one GET (``submit``'s check that a job can be scaled);
- ``look_up``: one GET per named ElasticJob (``schedule``'s check of which
  policy drives a job it has no record of); the object read goes on with the
  job's scale (``ScaleRequest.observed``), so the scaler does not read it again;
- ``inquire``: nodes and non-terminated pods (EDL's ``InquiryResource``),
  for the rare caller outside the planner that wants the whole picture.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

from scheduler_core.accounting import inquire
from scheduler_core.models import ClusterResource, ElasticJob
from scheduler_core.ports import ObservedJob
from workers.adapters.kubernetes.cache import LIST_PAGE_SIZE, NON_TERMINATED_PODS
from workers.adapters.kubernetes.client import JsonObject, KubeApiError, KubeClient
from workers.adapters.kubernetes.jobs import (
    EDL,
    ScaleTargetView,
    elastic_job,
    namespace_and_name,
    scale_target_ref,
    view_of_scale,
    view_of_workload,
)
from workers.adapters.kubernetes.kinds import (
    ELASTICJOBS,
    JOBS,
    NODES,
    PODS,
    WATCHED_TARGETS,
    KindResolver,
    ResourceKind,
)

log = logging.getLogger(__name__)
NOT_FOUND = 404


class DirectClusterReader:
    """Implements ``scheduler_core.ports.ClusterReader`` with targeted LISTs, no cache."""

    def __init__(
        self,
        client: KubeClient,
        *,
        gpu_resource: str,
        namespaces: tuple[str, ...] = (),
        default_policy: str = "edl",
        resolver: KindResolver | None = None,
    ) -> None:
        self._client = client
        self._gpu_resource = gpu_resource
        self._namespaces = namespaces
        self._default_policy = default_policy
        self._resolver = resolver or KindResolver(lambda path: client.request("GET", path))

    def inquire(self) -> ClusterResource:
        return inquire(
            list(self._list(NODES, scoped=False)),
            list(self._list(PODS, scoped=False, fields=NON_TERMINATED_PODS)),
            gpu_resource=self._gpu_resource,
        )

    def has_elastic_job(self, key: str) -> bool:
        """Whether ElasticJob ``namespace/name`` exists: one GET, no listing."""
        namespace, _, name = key.partition("/")
        try:
            self._client.request("GET", ELASTICJOBS.object_path(namespace, name))
        except KubeApiError as error:
            if error.status == NOT_FOUND:
                return False
            raise
        return True

    def look_up(self, jobs: Sequence[str]) -> Mapping[str, ObservedJob]:
        """``JobLookup``: each named ElasticJob in scope that exists (one GET each), with
        its policy and the object as read (without ``managedFields``: it travels in a
        Celery message; a write without them keeps the server's own)."""
        found: dict[str, ObservedJob] = {}
        for key in jobs:
            namespace, _, name = key.partition("/")
            if self._namespaces and namespace not in self._namespaces:
                continue
            try:
                resource = self._client.request("GET", ELASTICJOBS.object_path(namespace, name))
            except KubeApiError as error:
                if error.status == NOT_FOUND:
                    continue
                raise
            policy = self._policy(resource)
            if policy is None:
                continue
            meta = {
                k: v for k, v in (resource.get("metadata") or {}).items() if k != "managedFields"
            }
            found[key] = ObservedJob(policy=policy, observed={**resource, "metadata": meta})
        return found

    def _policy(self, resource: JsonObject) -> str | None:
        """The policy that drives the job: its ``spec.policy``; without one it depends on
        whether its replicas hold GPUs (``elastic_job``), so its target is read too."""
        named = (resource.get("spec") or {}).get("policy")
        if named:
            return str(named)
        if self._default_policy == EDL:
            return EDL  # with GPUs or without: nothing to read
        ref = scale_target_ref(resource)
        if not (ref.api_version and ref.kind and ref.name):
            return None
        namespace, _ = namespace_and_name(resource)
        kind = self._resolver.resolve(ref.api_version, ref.kind)
        workloads: dict[tuple[ResourceKind, str, str], JsonObject] = {}
        if kind in WATCHED_TARGETS:
            # A LIST of the one name: event workers may list these kinds, not get them.
            named = {"fieldSelector": f"metadata.name={ref.name}"}
            page = self._client.request("GET", kind.collection_path(namespace), query=named)
            for workload in page.get("items") or []:
                workloads[(kind, *namespace_and_name(workload))] = workload
        view = self._target_view(resource, workloads)
        job = self._elastic_job(resource, view) if view is not None else None
        return job.policy if job is not None else None

    def elastic_jobs(self) -> Sequence[ElasticJob]:
        resources = sorted(self._list(ELASTICJOBS), key=namespace_and_name)
        wanted: set[ResourceKind] = set()
        for resource in resources:
            ref = scale_target_ref(resource)
            if ref.api_version and ref.kind:
                kind = self._resolver.resolve(ref.api_version, ref.kind)
                if kind in WATCHED_TARGETS:
                    wanted.add(kind)
        workloads = {
            (kind, *namespace_and_name(item)): item
            for kind in sorted(wanted, key=lambda k: k.plural)
            for item in self._list(kind)
        }
        found: list[ElasticJob] = []
        for resource in resources:
            view = self._target_view(resource, workloads)
            job = self._elastic_job(resource, view) if view is not None else None
            if job is not None:
                found.append(job)
        return found

    def _elastic_job(self, resource: JsonObject, view: ScaleTargetView) -> ElasticJob | None:
        """The job ``resource`` describes; None (logged) when its spec does not make one."""
        try:
            return elastic_job(
                resource,
                view,
                target_pods=[],
                gpu_resource=self._gpu_resource,
                default_policy=self._default_policy,
            )
        except ValueError as error:
            namespace, name = namespace_and_name(resource)
            log.warning("ElasticJob %s/%s skipped: %s", namespace, name, error)
            return None

    def _target_view(
        self, resource: JsonObject, workloads: dict[tuple[ResourceKind, str, str], JsonObject]
    ) -> ScaleTargetView | None:
        namespace, _ = namespace_and_name(resource)
        ref = scale_target_ref(resource)
        if not (ref.api_version and ref.kind and ref.name):
            return None
        kind = self._resolver.resolve(ref.api_version, ref.kind)
        if kind in WATCHED_TARGETS:
            workload = workloads.get((kind, namespace, ref.name))
            return None if workload is None else view_of_workload(workload, batch_job=kind == JOBS)
        try:
            scale = self._client.request(
                "GET", kind.object_path(namespace, ref.name, subresource="scale")
            )
        except KubeApiError as error:
            if error.status in (403, 404):
                return None
            raise
        return view_of_scale(scale)

    def _list(
        self, kind: ResourceKind, *, scoped: bool = True, fields: str | None = None
    ) -> Iterator[JsonObject]:
        """Every item of ``kind`` in scope (each namespace of the scope, or all), paged."""
        scopes: tuple[str | None, ...] = (
            self._namespaces if scoped and self._namespaces else (None,)
        )
        for scope in scopes:
            query: dict[str, str | int | bool] = {"limit": LIST_PAGE_SIZE}
            if fields:
                query["fieldSelector"] = fields
            path = kind.collection_path(scope)
            while True:
                page = self._client.request("GET", path, query=query)
                yield from page.get("items") or []
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
                query["continue"] = token
