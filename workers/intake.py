"""One path per report: how an epoch report, or a submission, enters the runtime.

Every entry point calls these functions, and nothing else puts work into the
SchedulerQueue: the HTTP API (``POST /job``, ``POST /train``), the KubeML
listener, and, for services that speak Celery, the tasks
``trainscaler.report_epoch`` and ``trainscaler.submit`` (one hop into the same
call). A report's path (docs/runtime.md names each hop):

1. validated, and checked against ``TRAINSCALER_NAMESPACES``;
2. pushed into the train queue in one Lua call: numbered, kept in its job's
   history, queued with its reply key, the schedule trigger claimed
   (``workers.adapters.report_intake``);
3. if that push claimed the trigger, ``trigger`` sends ``trainscaler.schedule``
   (one Celery message to ``events`` for however many reports it then finds);
4. ``schedule`` decides and pushes each waiting sender's answer
   (``DecisionReply``) to its reply key, in the round trip that acks the
   queue item (``workers.scheduling``); the scale commands go to ``cluster-writes``;
5. the sender (the API) waits on its reply key with ``BLPOP``, bounded
   (``workers.api.replies``); an answer nobody waits for expires with its key.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from scheduler_core.models import EpochReport, Reason, TrainRequest, job_key
from workers.adapters.redis_queue import WAIT, QueueFullError
from workers.adapters.state_store import JobRecord
from workers.client import submission_job_id
from workers.targets import check_target
from workers.wiring import Runtime

SCHEDULE_FLAG = "schedule:triggered"
# An answer waits this long for its sender (the API waits at most 10 s), then expires.
REPLY_TTL_S = 60.0

# Sends one ``trainscaler.schedule`` (the API's Celery producer, or the task itself).
# Called with the job whose push claimed the schedule trigger (the run's hint).
Trigger = Callable[[str], object]


class OutOfScope(ValueError):
    """An identity outside ``TRAINSCALER_NAMESPACES``; the text names the field."""


def require_scope(rt: Runtime, namespace: str, *, field: str) -> None:
    if not rt.settings.namespace_allowed(namespace):
        raise OutOfScope(f"{field}: namespace {namespace!r} is outside TRAINSCALER_NAMESPACES")


class DecisionReply(BaseModel):
    """What ``schedule`` answers a waiting sender once its report is decided.

    ``parallelism``: the job's target after the report (None: none decided yet);
    ``generation`` and ``reason``: the decision made on it, when one was.
    """

    model_config = ConfigDict(frozen=True)

    parallelism: int | None = None
    generation: int | None = None
    reason: Reason | None = None


class FinishReply(BaseModel):
    """What ``finish`` answers a waiting sender: when the job was recorded as finished."""

    model_config = ConfigDict(frozen=True)

    finished_at: float


def schedule_flag_ttl(rt: Runtime) -> float:
    """How long a claimed trigger stands without its schedule task having started."""
    return max(rt.settings.lease_seconds, 5.0)


def reply_prefix(rt: Runtime) -> str:
    return rt.store.key("reply:")


def new_reply_key(rt: Runtime) -> str:
    """A fresh key for one sender to wait on."""
    return f"{reply_prefix(rt)}{uuid.uuid4().hex}"


def is_reply_key(rt: Runtime, key: str) -> bool:
    """Whether ``key`` is one ``new_reply_key`` could have made (answers go nowhere else)."""
    prefix = reply_prefix(rt)
    suffix = key[len(prefix) :]
    return key.startswith(prefix) and len(suffix) == 32 and suffix.isalnum()


def accept_report(
    rt: Runtime,
    payload: Any,
    *,
    trigger: Trigger | None = None,
    reply_to: str | None = None,
) -> EpochReport:
    """KubeML ``UpdateTask``: validate, and queue to train in one round trip.

    Returns the report as queued (numbered). Raises ``ValidationError``,
    ``OutOfScope`` and ``QueueFullError`` (after triggering: a full queue
    wants draining). ``trigger`` is called when this push claimed the
    schedule trigger; None leaves running ``schedule`` to the caller (tests).
    ``reply_to`` (``new_reply_key``) gets the ``DecisionReply``.
    """
    report = EpochReport.model_validate(payload)
    require_scope(rt, report.job.partition("/")[0], field="job")
    try:
        pushed = rt.report_intake.push(
            report,
            now=rt.clock.now(),
            keep=rt.settings.metrics_history,
            wake_key=rt.store.key(SCHEDULE_FLAG),
            wake_ttl=schedule_flag_ttl(rt),
            reply_to=reply_to,
        )
    except QueueFullError:
        if trigger is not None:
            trigger(report.job)
        raise
    if pushed.woke and trigger is not None:
        trigger(report.job)
    return pushed.report


def accept_submission(
    rt: Runtime, payload: Any, *, submission_id: str, trigger: Trigger | None = None
) -> str:
    """KubeML ``CreateTask``: validate, record the job, queue it to wait; its job key.

    Raises ``ValidationError``, ``OutOfScope``, ``QueueFullError`` and
    ``workers.targets.NoTargetError`` for a request that could never be scaled.
    """
    request = TrainRequest.model_validate(payload)
    require_scope(rt, request.namespace, field="namespace")
    job_id = submission_job_id(submission_id)
    job = job_key(request.namespace, job_id)
    # Refused here, with the reason, rather than dead-lettering every decision later.
    check_target(request, job=job, scaler=rt.settings.scaler, reader=rt.cluster_reader)
    now = rt.clock.now()
    record = JobRecord(
        job=job, job_id=job_id, policy=rt.settings.job_policy, request=request, created_at=now
    )
    rt.store.save_job(record)
    try:
        _, _, woke = rt.queue.push_and_wake(
            WAIT,
            job,
            payload={"job": job},
            now=now,
            wake_key=rt.store.key(SCHEDULE_FLAG),
            wake_ttl=schedule_flag_ttl(rt),
        )
    except QueueFullError:
        if trigger is not None:
            trigger(job)
        raise
    if woke and trigger is not None:
        trigger(job)
    return job


def answer(rt: Runtime, reply_to: str, *, reply: BaseModel) -> None:
    """Push one answer to a waiting sender's key, to expire after ``REPLY_TTL_S``."""
    pipe = rt.redis.pipeline(transaction=False)
    pipe.rpush(reply_to, reply.model_dump_json())
    pipe.pexpire(reply_to, int(REPLY_TTL_S * 1000))
    pipe.execute()
