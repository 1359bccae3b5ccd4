"""KubeML's scheduler routes: ``POST /train``, ``POST /job``, ``DELETE /finish/{taskId}``.

Each validates its body with the core's models (422 names the fields), then
enqueues the runtime's Celery task by name and waits briefly (``wait``
seconds, bounded) for the runtime to act, reading its state in Redis:

* ``/train`` -> ``trainscaler.submit``; 201 once the job is recorded, else 202.
  The job id is known at once (derived from the task id, as the runtime does).
* ``/job`` -> ``trainscaler.report_epoch``; 200 with the parallelism to use
  next once the report was decided, else 202 with the URL to poll.
* ``/finish`` -> ``trainscaler.finish``; 200 once forgotten, else 202; 404 for
  an unknown job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Response, status
from starlette.concurrency import run_in_threadpool

from scheduler_core.models import TrainRequest, TrainTask
from workers.api.auth import require_token
from workers.api.context import ApiContext, context
from workers.api.identity_checks import require_job_ref, require_namespace, require_scope
from workers.api.schemas import FinishAnswer, ReportAnswer, TrainAnswer
from workers.api.text_checks import require_utf8
from workers.api.views import resolve_job
from workers.client import new_submission_id, report_from_task, submission_key
from workers.targets import NoTargetError, check_target

T = TypeVar("T")

# KubeML: a job's parameter server blocks on this answer between epochs, so
# the wait is short and bounded; past it the caller polls.
MAX_WAIT_S = 10.0
DEFAULT_WAIT_S = 2.0

router = APIRouter(tags=["kubeml"], dependencies=[Depends(require_token)])
Ctx = Annotated[ApiContext, Depends(context)]
Wait = Annotated[
    float,
    Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the runtime to act."),
]


async def _wait_for(ctx: ApiContext, read: Callable[[], T | None], *, seconds: float) -> T | None:
    """Poll ``read`` (a Redis read, run off the event loop) until it answers or time is up."""
    deadline = time.monotonic() + seconds
    while True:
        value = await run_in_threadpool(read)
        if value is not None or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(min(ctx.poll_interval, max(0.0, deadline - time.monotonic())))


def _job_url(job: str) -> str:
    # Header values must be Latin-1: percent-encode whatever a job id holds.
    return f"/jobs/{quote(job, safe='/')}"


@router.post(
    "/train",
    status_code=status.HTTP_201_CREATED,
    responses={202: {"model": TrainAnswer, "description": "queued, not recorded yet"}},
)
async def train(
    request: TrainRequest, ctx: Ctx, response: Response, wait: Wait = DEFAULT_WAIT_S
) -> TrainAnswer:
    """KubeML ``CreateTask``: submit a train request; the answer carries the job id.

    422 when the request could never be scaled: no ``ps_url`` and no ElasticJob
    for its key (``workers.targets``).
    """
    require_utf8(body=request)
    require_scope(ctx.settings, request.namespace, field="body.namespace")
    rt = ctx.runtime
    submission = new_submission_id()
    job = submission_key(request, submission)
    try:
        await run_in_threadpool(
            lambda: check_target(
                request, job=job, scaler=rt.settings.scaler, reader=rt.cluster_reader
            )
        )
    except NoTargetError as error:
        raise HTTPException(status_code=422, detail=str(error)) from None
    task_id, job = await run_in_threadpool(lambda: ctx.producer.submit(request, task_id=submission))
    store = ctx.runtime.store
    recorded = await _wait_for(ctx, lambda: store.get_job(job), seconds=wait)
    response.headers["Location"] = _job_url(job)
    if recorded is None:
        response.status_code = status.HTTP_202_ACCEPTED
    return TrainAnswer(
        job=job,
        job_id=job.rsplit("/", 1)[-1],
        task_id=task_id,
        recorded=recorded is not None,
        poll=_job_url(job),
    )


@router.post(
    "/job",
    responses={202: {"model": ReportAnswer, "description": "queued, not decided yet"}},
)
async def report_epoch(
    task: TrainTask, ctx: Ctx, response: Response, wait: Wait = DEFAULT_WAIT_S
) -> ReportAnswer:
    """KubeML ``UpdateTask``: a job's end-of-epoch report (parallelism, elapsed time)."""
    require_utf8(body=task)
    rt = ctx.runtime
    # Numbered here, before it is queued, so a redelivered task keeps its epoch.
    report = await run_in_threadpool(rt.store.numbered, report_from_task(task, at=rt.clock.now()))
    job = report.job
    require_scope(ctx.settings, job.partition("/")[0], field="body.job_id")
    # Decided means: the job's schedule cursor moved past what it was before
    # this report was queued (one reporter per job, as in KubeML).
    before = (await run_in_threadpool(rt.store.cursor, job)).last_seq
    await run_in_threadpool(ctx.producer.report, report)

    def decided() -> int | None:
        cursor = rt.store.cursor(job)
        return cursor.last_seq if cursor.last_seq > before else None

    seq = await _wait_for(ctx, decided, seconds=wait)
    if seq is None:
        response.status_code = status.HTTP_202_ACCEPTED
        return ReportAnswer(job=job, decided=False, poll=_job_url(job))
    cursor = await run_in_threadpool(rt.store.cursor, job)
    newest = await run_in_threadpool(lambda: rt.store.decisions(job, limit=1))
    record = newest[0] if newest else None
    return ReportAnswer(
        job=job,
        decided=True,
        parallelism=cursor.last_target if cursor.last_target is not None else report.replicas,
        reason=record.decision.reason if record else None,
        generation=record.generation if record else None,
        poll=_job_url(job),
    )


@router.delete(
    "/finish/{task_id:path}",
    responses={
        202: {"model": FinishAnswer, "description": "queued, not forgotten yet"},
        404: {"description": "unknown job"},
    },
)
async def finish(
    task_id: str,
    ctx: Ctx,
    response: Response,
    wait: Wait = DEFAULT_WAIT_S,
    namespace: Annotated[str | None, Query(min_length=1, max_length=253)] = None,
) -> FinishAnswer:
    """KubeML ``taskFinished``: the job ended; the runtime forgets its state."""
    require_utf8(path=task_id, query=namespace)
    require_job_ref(task_id, loc=("path", "task_id"))
    require_namespace(namespace, loc=("query", "namespace"))
    store = ctx.runtime.store
    job = await run_in_threadpool(lambda: resolve_job(store, task_id, namespace=namespace))
    if job is None:
        raise HTTPException(status_code=404, detail=f"unknown job {task_id!r}")
    require_scope(ctx.settings, job.partition("/")[0], field="path.task_id")
    record = await run_in_threadpool(store.get_job, job)
    if record is not None and record.finished_at is not None:
        return FinishAnswer(job=job, finished=True, finished_at=record.finished_at)
    sent = await run_in_threadpool(ctx.producer.finish, job)

    def finished() -> float | None:
        current = store.get_job(job)
        return current.finished_at if current is not None else None

    at = await _wait_for(ctx, finished, seconds=wait)
    if at is None:
        response.status_code = status.HTTP_202_ACCEPTED
    return FinishAnswer(job=job, finished=at is not None, finished_at=at, task_id=sent)
