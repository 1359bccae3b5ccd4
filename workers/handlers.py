"""What each task does, as plain functions over a ``Runtime`` (no Celery here).

Each handler loads state, calls the pure core, applies, and records. The
Celery tasks in ``workers.tasks`` only validate payloads, call these, and send
follow-up tasks through the callbacks they pass in. ``schedule`` lives in
``workers.scheduling``, ``scale`` and ``autoscale`` in ``workers.scaling``;
their entry points are re-exported here.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Any

from scheduler_core.models import EpochReport, TrainRequest, job_key
from scheduler_core.registry import get_policy, load_state
from workers.adapters.redis_queue import TRAIN, WAIT
from workers.adapters.state_store import JobRecord
from workers.scaling import (
    SCALE_BATCH,
    SCALE_ERRORS,
    ScaleCommand,
    ScaleLockBusy,
    ScaleResult,
    SendScale,
    SendScales,
    apply_scale,
    apply_scales,
    autoscale_once,
    free_after,
)
from workers.scheduling import ScheduleSummary, schedule_once
from workers.targets import check_target
from workers.wiring import Runtime

SCHEDULE_FLAG = "schedule:triggered"


class OutOfScope(ValueError):
    """An identity outside ``TRAINSCALER_NAMESPACES``; the text names the field."""


def require_scope(rt: Runtime, namespace: str, *, field: str) -> None:
    if not rt.settings.namespace_allowed(namespace):
        raise OutOfScope(f"{field}: namespace {namespace!r} is outside TRAINSCALER_NAMESPACES")


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- submit / report_epoch --------------------------------------------------------


def accept_submission(rt: Runtime, payload: Any, *, submission_id: str) -> str:
    """KubeML ``CreateTask``: validate, assign an id, record the job, queue it to wait.

    Raises ``ValidationError`` for a malformed payload and
    ``workers.targets.NoTargetError`` for a request that could never be scaled.

    The id derives from the submission (task) id, so a redelivered submit
    records the same job instead of a second one.
    """
    request = TrainRequest.model_validate(payload)
    require_scope(rt, request.namespace, field="namespace")
    job_id = uuid.uuid5(uuid.NAMESPACE_URL, f"trainscaler:{submission_id}").hex[:12]
    job = job_key(request.namespace, job_id)
    # Refused here, with the reason, rather than dead-lettering every decision later.
    check_target(request, job=job, scaler=rt.settings.scaler, reader=rt.cluster_reader)
    now = rt.clock.now()
    record = JobRecord(
        job=job, job_id=job_id, policy=rt.settings.job_policy, request=request, created_at=now
    )
    rt.store.save_job(record)
    rt.queue.push_entry(WAIT, job, {"job": job}, now=now)
    return job


def accept_report(rt: Runtime, payload: Any) -> tuple[EpochReport, bool]:
    """KubeML ``UpdateTask``: validate and queue to train (``schedule`` keeps it as
    the job's newest observation when it decides on it).

    One round trip; also claims the schedule trigger. Returns the report and
    whether the caller must send a ``schedule`` task (it claimed the trigger).
    Raises ``QueueFullError``; the caller should then send ``schedule`` anyway
    (the trigger may have been claimed, and a full queue wants draining).
    """
    report = EpochReport.model_validate(payload)
    require_scope(rt, report.job.partition("/")[0], field="job")
    # Numbered (when the sender gave no epoch) and kept in the job's history at once.
    report = rt.store.numbered(report)
    if report.epoch_time_s is not None:  # a first contact is no epoch
        rt.store.append_metrics([report], keep=rt.settings.metrics_history)
    _, _, woke = rt.queue.push_and_wake(
        TRAIN,
        report.job,
        report.model_dump(mode="json"),
        now=rt.clock.now(),
        wake_key=rt.store.key(SCHEDULE_FLAG),
        wake_ttl=schedule_flag_ttl(rt),
    )
    return report, woke


def schedule_flag_ttl(rt: Runtime) -> float:
    """How long a claimed trigger stands without its schedule task having started."""
    return max(rt.settings.lease_seconds, 5.0)


# --- finish / sweep -----------------------------------------------------------------------


def finish_job(rt: Runtime, job: str) -> dict[str, Any]:
    """KubeML ``taskFinished``: forget the job's policy state and queue entries."""
    record = rt.store.get_job(job)
    policy = record.policy if record is not None else rt.settings.job_policy
    forget = getattr(get_policy(policy), "forget", None)
    if record is None:
        # A job known only from its reports (an ElasticJob): recorded as finished too,
        # under the policy its ElasticJob named, so the job views show it as finished.
        record = JobRecord(
            job=job, job_id=job.rsplit("/", 1)[-1], policy=_elastic_policy(rt, job) or policy
        )

    def forgotten(raw: str | None) -> str | None:
        if raw is None or forget is None:
            return None
        state = forget(load_state(policy, raw), job)
        # Policy state is kept per job, so a state with the job forgotten is empty.
        empty: bool = state == type(state)()
        return None if empty else str(state.model_dump_json())

    rt.store.forget_job_policy(job, policy, forgotten)
    scaler_forget = getattr(rt.scaler, "forget", None)
    if callable(scaler_forget):
        scaler_forget(job)  # parameter-server mode: its accepted parallelism too
    removed = rt.queue.remove(job)
    finished_at = rt.clock.now()
    rt.store.save_job(record.model_copy(update={"finished_at": finished_at}))
    rt.retention.retire(job, at=finished_at)  # after the save: a SET clears a TTL
    return {"job": job, "queue_entries_removed": removed}


def _elastic_policy(rt: Runtime, job: str) -> str | None:
    try:
        return next((j.policy for j in rt.cluster_reader.elastic_jobs() if j.key == job), None)
    except Exception:  # any adapter failure: the job policy names it instead
        return None


def sweep_leases(rt: Runtime) -> dict[str, Any]:
    now = rt.clock.now()
    returned = rt.queue.return_expired(now=now)
    purged = rt.retention.purge(now=now)  # finished jobs past their retention
    depths = rt.queue.depths()
    return {
        "returned": returned,
        "purged": purged,
        "depths": depths,
        "pending": any(depths.values()),
    }


__all__ = [
    "SCALE_BATCH",
    "SCALE_ERRORS",
    "SCHEDULE_FLAG",
    "ScaleCommand",
    "ScaleLockBusy",
    "ScaleResult",
    "ScheduleSummary",
    "SendScale",
    "SendScales",
    "accept_report",
    "accept_submission",
    "apply_scale",
    "apply_scales",
    "autoscale_once",
    "finish_job",
    "free_after",
    "owner_id",
    "schedule_flag_ttl",
    "schedule_once",
    "sweep_leases",
]
