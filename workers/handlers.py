"""What each task does, as plain functions over a ``Runtime`` (no Celery here).

Each handler loads state, calls the pure core, applies, and records. The
Celery tasks in ``workers.tasks`` only validate payloads, call these, and send
follow-up tasks through the callbacks they pass in. ``submit`` and
``report_epoch`` live in ``workers.intake`` (the API calls the same),
``schedule`` in ``workers.scheduling``, ``scale`` and ``autoscale`` in
``workers.scaling``; their entry points are re-exported here.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from scheduler_core.registry import get_policy, load_state
from workers.adapters.state_store import JobRecord
from workers.intake import (
    SCHEDULE_FLAG,
    FinishReply,
    OutOfScope,
    accept_report,
    accept_submission,
    answer,
    require_scope,
    schedule_flag_ttl,
)
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
    lost_scales,
)
from workers.scheduling import ScheduleSummary, schedule_once
from workers.wiring import Runtime


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# --- finish / sweep -----------------------------------------------------------------------


def finish_job(rt: Runtime, job: str, *, reply_to: str | None = None) -> dict[str, Any]:
    """KubeML ``taskFinished``: forget the job's policy state and queue entries.

    ``reply_to`` (a reply key its sender waits on) gets a ``FinishReply``.
    """
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

    rt.store.forget_job_policy(job, policy, forget=forgotten)
    scaler_forget = getattr(rt.scaler, "forget", None)
    if callable(scaler_forget):
        scaler_forget(job)  # parameter-server mode: its accepted parallelism too
    removed = rt.queue.remove(job)
    finished_at = rt.clock.now()
    rt.store.save_job(record.model_copy(update={"finished_at": finished_at}))
    rt.retention.retire(job, at=finished_at)  # after the save: a SET clears a TTL
    if reply_to is not None:
        answer(rt, reply_to, reply=FinishReply(finished_at=finished_at))
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
    "OutOfScope",
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
    "lost_scales",
    "owner_id",
    "require_scope",
    "schedule_flag_ttl",
    "schedule_once",
    "sweep_leases",
]
