"""The small Protocols that separate the pure core from the outside world.

Adapters in ``workers.adapters`` (Kubernetes, Redis, Prometheus) and the
simulated parts in ``sim`` implement these; the core and the tasks only talk
to these shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from scheduler_core.models import ClusterResource, ElasticJob


class Clock(Protocol):
    """Injected time, in seconds since the epoch."""

    def now(self) -> float: ...


class ClusterReader(Protocol):
    """Reads the cluster: EDL's ``InquiryResource`` plus the elastic jobs."""

    def inquire(self) -> ClusterResource: ...

    def elastic_jobs(self) -> Sequence[ElasticJob]: ...


class ReplicaScaler(Protocol):
    """Applies an absolute replica count to a job's scale target.

    Returns the replica count in force afterwards. Raises
    ``TransientScaleError`` for failures worth retrying and
    ``PermanentScaleError`` for the rest. ``policy``, ``rule`` and
    ``limited_by`` name what decided (the decision's reason); an adapter may
    record them (ElasticJob ``status.lastDecision``) or ignore them. Calling
    it with the count already in force must be harmless: it confirms (and may
    repair what the adapter records), it changes nothing.
    """

    def current_replicas(self, job: str) -> int: ...

    def scale(
        self,
        job: str,
        replicas: int,
        *,
        reason: str,
        policy: str | None = None,
        rule: str | None = None,
        limited_by: str | None = None,
    ) -> int: ...


class QueueStore(Protocol):
    """KubeML's SchedulerQueue: a train queue served before a wait queue."""

    def push(self, queue: str, item_id: str, payload: Mapping[str, Any]) -> None: ...

    def pop(self, *, lease_seconds: float) -> tuple[str, str, dict[str, Any]] | None: ...

    def ack(self, queue: str, item_id: str) -> None: ...

    def depths(self) -> dict[str, int]: ...


class TransientScaleError(Exception):
    """A scale operation failed in a way that a retry may fix (5xx, 429, 409, timeouts)."""


class PermanentScaleError(Exception):
    """A scale operation failed in a way no retry fixes (404, 403, 422)."""
