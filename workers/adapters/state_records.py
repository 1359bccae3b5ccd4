"""The JSON records the runtime keeps in Redis (see ``state_store`` for the keys).

Each record is a frozen pydantic model, stored with ``model_dump_json`` and
read with ``model_validate_json``; the HTTP API reads the same models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from scheduler_core.models import (
    ClusterResource,
    EpochReport,
    Resources,
    ScalingDecision,
    ScalingPlan,
    TrainRequest,
)


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobRecord(Record):
    job: str
    job_id: str
    policy: str
    request: TrainRequest | None = None
    created_at: float = 0.0
    finished_at: float | None = None


class ScheduleCursor(Record):
    last_seq: int = 0
    last_target: int | None = None
    last_epoch: int | None = None


class DecisionRecord(Record):
    generation: int
    at: float
    source: Literal["schedule", "autoscale"]
    decision: ScalingDecision


class AppliedTarget(Record):
    generation: int
    target: int
    at: float
    outcome: str


class PlanRecord(Record):
    run_id: int
    at: float
    owner: str
    plan: ScalingPlan
    cluster: ClusterResource
    generations: dict[str, int] = {}
    # Per-replica requests of every job the planner saw (schedule clamps with them).
    requests: dict[str, Resources] = {}
    # The policy of every job the planner saw: ``schedule`` hands the cluster policy's
    # jobs' reports to it and decides the others' (empty in records written before).
    policies: dict[str, str] = {}


class AutoscaleRun(Record):
    run_id: int
    owner: str
    started: float
    finished: float
    changes: int
    note: str = ""


@dataclass(frozen=True)
class Reservation:
    """Replicas granted out of the free capacity (``granted`` <= wanted)."""

    granted: int
    constrained: bool


@dataclass(frozen=True)
class ScheduleWrite:
    """What one job's schedule compare-and-set writes."""

    state: str
    cursor: ScheduleCursor
    # The decision to record (None: none).
    record: DecisionRecord | None = None
    # The newest report seen (None: none).
    newest_report: EpochReport | None = None
    # Reports handed to the cluster policy's inbox (a job the cluster policy manages).
    for_cluster: tuple[EpochReport, ...] = ()
    # The decision changes the target: a scale is to be sent (pending-scale index).
    scales: bool = False
    # Take the job's scale lock for that scale with this token, if it is free
    # ('' : leave it to the scale), for this long (ms).
    scale_lock: str = ""
    scale_lock_ttl_ms: int = 0


@dataclass(frozen=True)
class ClusterRound:
    """One read of the cluster policy's state and the reports waiting for it."""

    policy: str
    state: str | None
    reports: tuple[EpochReport, ...]


@dataclass(frozen=True)
class ScheduleSnapshot:
    """One read of a job's schedule state, raw, so a write can compare against it."""

    job: str
    policy: str
    state: str | None
    cursor_raw: str | None
    generation_raw: str | None

    @property
    def cursor(self) -> ScheduleCursor:
        raw = self.cursor_raw
        return ScheduleCursor.model_validate_json(raw) if raw else ScheduleCursor()

    @property
    def generation(self) -> int:
        return int(self.generation_raw or 0)


class ConcurrentUpdateError(Exception):
    """Optimistic concurrency gave up after too many conflicting writers."""
