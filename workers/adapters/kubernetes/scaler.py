"""``ReplicaScaler`` for Kubernetes: set an ElasticJob's target to N replicas.

- Deployments, StatefulSets, ReplicaSets and any custom resource with a
  ``/scale`` subresource: read the ``autoscaling/v1`` Scale, PUT it back with
  the new ``spec.replicas`` and the read ``resourceVersion`` as precondition.
- ``batch/v1`` Jobs (no ``/scale``): merge-patch ``spec.parallelism``, with the
  read ``resourceVersion`` in the patch as precondition.
- A 409 Conflict is re-read and retried a few times, then reported as
  transient; API errors map to ``TransientScaleError`` (connection errors,
  timeouts, 429, 5xx, 409 after retries) or ``PermanentScaleError`` (400,
  401, 403, 404, 422 and other 4xx).
- After a scale: the ElasticJob's status through ``/status`` and a core/v1
  Event (``ScaledUp``, ``ScaledDown``; ``ScaleFailed`` on errors).
- One read of current state per scale: the target's Scale (or Job), whose
  ``resourceVersion`` guards the write. The ElasticJob (bounds, ``paused``,
  ``scaleTargetRef``, previous status) comes with the request when the planner
  hands its cached copy (``ScaleRequest.observed``); only without one is it
  read first. A stale copy costs a 409 on the ``/status`` write, which re-reads.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler_core import identity
from scheduler_core.ports import (
    Clock,
    PermanentScaleError,
    ScaleOutcome,
    ScaleRequest,
    TransientScaleError,
)
from workers.adapters.kubernetes.client import (
    MERGE_PATCH,
    JsonObject,
    KubeApiError,
    KubeClient,
    KubeConnectionError,
)
from workers.adapters.kubernetes.crd import GROUP, KIND, VERSION
from workers.adapters.kubernetes.events import (
    SCALE_FAILED,
    SCALED_DOWN,
    SCALED_UP,
    EventRecorder,
)
from workers.adapters.kubernetes.jobs import scale_target_ref
from workers.adapters.kubernetes.kinds import ELASTICJOBS, JOBS, KindResolver, ResourceKind
from workers.adapters.kubernetes.status import (
    Decision,
    next_status,
    replica_limit,
    scaling_conditions,
)

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 409, 429})
CONFLICT = 409


def map_error(error: Exception, *, action: str) -> Exception:
    """Transient (worth a retry) or permanent, by the API's answer."""
    if isinstance(error, KubeConnectionError):
        return TransientScaleError(f"{action}: {error}")
    if isinstance(error, KubeApiError):
        if error.status in TRANSIENT_STATUSES or error.status >= 500:
            return TransientScaleError(f"{action}: {error}")
        return PermanentScaleError(f"{action}: {error}")
    return error


def split_job_key(job: str, *, namespaces: tuple[str, ...] = ()) -> tuple[str, str]:
    """Defence in depth: the key is a valid ``namespace/name`` inside the scope, or
    the scale is refused (permanent) before any request is made."""
    try:
        namespace, name = identity.split_job_key(job)
    except ValueError as error:
        raise PermanentScaleError(f"job: {error}") from error
    if namespaces and namespace not in namespaces:
        raise PermanentScaleError(f"job: namespace {namespace!r} is outside TRAINSCALER_NAMESPACES")
    return namespace, name


class ScaleTarget(Protocol):
    """One way to read and write a workload's replica count."""

    @property
    def description(self) -> str: ...

    def read(self) -> tuple[int, JsonObject]: ...

    def write(self, replicas: int, read: JsonObject) -> int: ...


@dataclass
class ScaleSubresource:
    """``autoscaling/v1`` Scale of any kind that has one."""

    client: KubeClient
    kind: ResourceKind
    namespace: str
    name: str

    @property
    def description(self) -> str:
        return f"{self.kind.kind}/{self.name}"

    def _path(self) -> str:
        return self.kind.object_path(self.namespace, self.name, subresource="scale")

    def read(self) -> tuple[int, JsonObject]:
        scale = self.client.request("GET", self._path())
        return int((scale.get("spec") or {}).get("replicas") or 0), scale

    def write(self, replicas: int, read: JsonObject) -> int:
        # The read object keeps metadata.resourceVersion: the server answers 409 if stale.
        body = copy.deepcopy(read)
        body.setdefault("apiVersion", "autoscaling/v1")
        body.setdefault("kind", "Scale")
        body["spec"] = {**(body.get("spec") or {}), "replicas": replicas}
        body.pop("status", None)
        answer = self.client.request(
            "PUT", self._path(), body=body, query={"fieldManager": self.client.field_manager}
        )
        return int((answer.get("spec") or {}).get("replicas") or 0)


@dataclass
class BatchJobParallelism:
    """A ``batch/v1`` Job's ``spec.parallelism`` (Jobs have no /scale)."""

    client: KubeClient
    namespace: str
    name: str

    @property
    def description(self) -> str:
        return f"Job/{self.name}"

    def read(self) -> tuple[int, JsonObject]:
        job = self.client.request("GET", JOBS.object_path(self.namespace, self.name))
        parallelism = (job.get("spec") or {}).get("parallelism")
        # Kubernetes: parallelism defaults to 1.
        return (1 if parallelism is None else int(parallelism)), job

    def write(self, replicas: int, read: JsonObject) -> int:
        version = (read.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "spec": {"parallelism": replicas}}
        answer = self.client.request(
            "PATCH",
            JOBS.object_path(self.namespace, self.name),
            body=patch,
            content_type=MERGE_PATCH,
            query={"fieldManager": self.client.field_manager},
        )
        return int((answer.get("spec") or {}).get("parallelism") or 0)


class KubeReplicaScaler:
    """Implements ``scheduler_core.ports.ReplicaScaler`` for ElasticJobs (key ``ns/name``).

    Holds no cache: every call reads what it writes (targeted requests only).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        clock: Clock,
        conflict_retries: int = 3,
        resolver: KindResolver | None = None,
        component: str = "trainscaler",
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self._client = client
        self._namespaces = namespaces
        self._clock = clock
        self._conflict_retries = conflict_retries
        self._resolver = resolver or KindResolver(lambda path: client.request("GET", path))
        self._events = EventRecorder(client, clock=clock, component=component)

    # --- the port ------------------------------------------------------------

    def scale(self, request: ScaleRequest) -> ScaleOutcome:
        """Set the job's target to ``request.replicas`` (clamped to [min, max]; 0 is a
        preemption and stays 0).

        The decision's policy, rule, reason and limit go into
        ``status.lastDecision`` and the ``ScalingLimited`` condition.
        """
        job, replicas = request.job, request.replicas
        namespace, name = split_job_key(job, namespaces=self._namespaces)
        resource: JsonObject | None = None
        try:
            resource = self._elastic_job(namespace, name, observed=request.observed)
            spec = resource.get("spec") or {}
            target = self._target(resource)
            if spec.get("paused"):
                # The operator's override: report what is in force, write nothing.
                current, _ = target.read()
                return ScaleOutcome(job=job, before=current, after=current, note="paused")
            min_replicas = int(spec.get("minReplicas", 1))
            max_replicas = int(spec.get("maxReplicas", 1))
            if not 0 <= min_replicas <= max_replicas:
                # The CRD's schema forbids this; a server without validation may not.
                raise PermanentScaleError(
                    f"{job}: invalid bounds minReplicas={min_replicas} maxReplicas={max_replicas}"
                )
            # EDL: never shrink below min_replicas nor grow above max_replicas.
            # A target of 0 is a preemption (goodput, tiresias: the job holds no
            # replicas until it is planned again); minReplicas bounds a running job.
            desired = 0 if replicas == 0 else max(min_replicas, min(max_replicas, replicas))
            before, after = self._apply(target, desired)
        except (KubeApiError, KubeConnectionError) as error:
            mapped = map_error(error, action=f"scale {job} to {replicas}")
            if resource is not None:
                self._events.record(
                    resource, reason=SCALE_FAILED, message=str(mapped), warning=True
                )
            raise mapped from error
        reason = request.reason_text()
        if after != before:
            self._events.record(
                resource,
                reason=SCALED_UP if after > before else SCALED_DOWN,
                message=f"{target.description} {before} -> {after}: {reason}",
            )
        limit = replica_limit(
            requested=replicas,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            limited_by=request.limited_by(),
        )
        self._write_status(
            resource,
            current=after,
            desired=desired,
            decision=Decision(policy=request.policy or "", rule=request.reason.rule, reason=reason),
            conditions=scaling_conditions(target=target.description, current=after, limit=limit),
            scaled=after != before,
        )
        note = "" if desired == replicas else f"clamped to [{min_replicas}, {max_replicas}]"
        return ScaleOutcome(job=job, before=before, after=after, note=note)

    # --- reading ----------------------------------------------------------------

    def _elastic_job(self, namespace: str, name: str, *, observed: JsonObject | None) -> JsonObject:
        """The planner's copy when it handed one for this very job; else one GET."""
        if observed is not None and _names(observed) == (namespace, name):
            return observed
        return self._client.request("GET", ELASTICJOBS.object_path(namespace, name))

    def _target(self, resource: JsonObject) -> ScaleTarget:
        meta = resource.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        ref = scale_target_ref(resource)
        if not (ref.api_version and ref.kind and ref.name):
            raise PermanentScaleError(
                f"ElasticJob {namespace}/{meta.get('name')}: incomplete scaleTargetRef"
            )
        kind = self._resolver.resolve(ref.api_version, ref.kind)
        if kind == JOBS:
            return BatchJobParallelism(self._client, namespace, ref.name)
        return ScaleSubresource(self._client, kind, namespace, ref.name)

    # --- writing ----------------------------------------------------------------

    def _apply(self, target: ScaleTarget, desired: int) -> tuple[int, int]:
        """(replicas before, replicas after): one read, a write guarded by its
        ``resourceVersion``; a conflict is re-read and retried."""
        first: int | None = None
        for attempt in range(self._conflict_retries + 1):
            current, read = target.read()
            first = current if first is None else first
            if current == desired:
                return first, current
            try:
                return first, target.write(desired, read)
            except KubeApiError as error:
                if error.status != CONFLICT or attempt == self._conflict_retries:
                    raise
                log.info("%s: conflict, re-reading (attempt %d)", target.description, attempt + 1)
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_status(self, resource: JsonObject, **fields: Any) -> None:
        """PUT ``/status`` unless it already says this; a conflict re-reads the job."""
        meta = resource.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        path = ELASTICJOBS.object_path(namespace, name, subresource="status")
        current = resource
        for attempt in range(self._conflict_retries + 1):
            generation = int((current.get("metadata") or {}).get("generation") or 0)
            previous: Mapping[str, Any] = current.get("status") or {}
            status = next_status(previous, generation=generation, now=self._clock.now(), **fields)
            if _same_status(previous, status):
                return
            body = {**current, "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "status": status}
            try:
                self._client.request(
                    "PUT", path, body=body, query={"fieldManager": self._client.field_manager}
                )
                return
            except KubeApiError as error:
                if error.status != CONFLICT or attempt == self._conflict_retries:
                    raise map_error(error, action=f"status of {namespace}/{name}") from error
            except KubeConnectionError as error:
                raise map_error(error, action=f"status of {namespace}/{name}") from error
            try:
                current = self._client.request("GET", ELASTICJOBS.object_path(namespace, name))
            except (KubeApiError, KubeConnectionError) as error:
                raise map_error(error, action=f"re-read {namespace}/{name}") from error


def _names(obj: JsonObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _same_status(previous: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Equal apart from timestamps that only move with a change."""

    def comparable(value: Mapping[str, Any]) -> dict[str, Any]:
        conditions = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in value.get("conditions") or []
        ]
        return {**value, "conditions": conditions}

    return comparable(previous) == comparable(status)
