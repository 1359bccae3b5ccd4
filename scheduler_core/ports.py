"""The small Protocols that separate the pure core from the outside world.

Adapters in ``workers.adapters`` (Kubernetes, Redis, Prometheus) and the
simulated parts in ``trainscaler_sim`` implement these; the core and the tasks only talk
to these shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, NonNegativeInt

from scheduler_core.models import ClusterResource, ElasticJob, Reason


class Clock(Protocol):
    """Injected time, in seconds since the epoch."""

    def now(self) -> float: ...


class ClusterReader(Protocol):
    """Reads the cluster: EDL's ``InquiryResource`` plus the elastic jobs."""

    def inquire(self) -> ClusterResource: ...

    def elastic_jobs(self) -> Sequence[ElasticJob]: ...


class ObservedJob(BaseModel):
    """One job as a targeted read found it: the policy that drives it, and the
    object read (opaque to the core; None when the adapter has none), which the
    decision hands on to its scale as ``ScaleRequest.observed``."""

    model_config = ConfigDict(frozen=True)

    policy: str
    observed: dict[str, Any] | None = None


@runtime_checkable
class JobLookup(Protocol):
    """Targeted reads of named jobs (no listing, no cache): the ones that exist, by key."""

    def look_up(self, jobs: Sequence[str]) -> Mapping[str, ObservedJob]: ...


class ScaleRequest(BaseModel):
    """One absolute replica target for one job, with the decision that chose it.

    ``reason`` is the policy's reason (rule, message, numbers); ``policy`` names
    the policy that decided; ``generation`` the runtime's decision number (None
    for a call outside the runtime's decision path: a confirmation, a test, the
    EDL facade); ``epoch_time_s`` the epoch time of the report decided on
    (KubeML's ``JobState.elapsed_time``, echoed to a parameter server).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str
    replicas: NonNegativeInt
    reason: Reason
    policy: str | None = None
    generation: int | None = None
    epoch_time_s: float | None = None
    # The decider's copy of the job's object, as its adapter last saw it (the
    # planner's watch cache hands the ElasticJob), so the scaler need not read it
    # again; opaque to the core. A stale copy is caught by its resourceVersion.
    observed: dict[str, Any] | None = None

    def reason_text(self) -> str:
        """The message, with its generation when it has one; the rule travels on its own."""
        if self.generation is None:
            return self.reason.message
        return f"{self.reason.message} (generation {self.generation})"

    def limited_by(self) -> str | None:
        """What limited the target, from the planner's reason numbers (None: nothing)."""
        value = self.reason.numbers.get("limited_by")
        return None if value is None else str(value)


class ScaleOutcome(BaseModel):
    """What a scale did: the count found (``before``) and the count in force after.

    ``after`` may differ from the request's ``replicas`` (clamped to the job's
    bounds, or left alone because the job is paused); ``note`` says why.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str
    before: NonNegativeInt
    after: NonNegativeInt
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.before != self.after


class ReplicaScaler(Protocol):
    """Applies a ``ScaleRequest`` to a job's scale target; returns its ``ScaleOutcome``.

    Raises ``TransientScaleError`` for failures worth retrying and
    ``PermanentScaleError`` for the rest. The request carries the decision's
    reason; an adapter may record it (ElasticJob ``status.lastDecision``) or
    ignore it. Applying the count already in force must be harmless: it
    confirms (and may repair what the adapter records), it changes nothing.
    One call reads the current state once: the outcome's ``before`` is that read.
    """

    def scale(self, request: ScaleRequest) -> ScaleOutcome: ...


class QueueStore(Protocol):
    """KubeML's SchedulerQueue: a train queue served before a wait queue.

    Only what is used through the port: the queues' depths. Pushing, leasing
    and acknowledging are the Redis adapter's own (batched, with delivery
    tokens; workers/adapters/redis_queue.py).
    """

    def depths(self) -> dict[str, int]: ...


class TransientScaleError(Exception):
    """A scale operation failed in a way that a retry may fix (5xx, 429, 409, timeouts)."""


class PermanentScaleError(Exception):
    """A scale operation failed in a way no retry fixes (404, 403, 422)."""
