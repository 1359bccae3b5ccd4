"""KubeML's scheduler routes: ``POST /train``, ``POST /job``, ``DELETE /finish/{taskId}``.

Each validates its body with the core's models (422 names the fields), then
hands it to the runtime and waits briefly (``wait`` seconds, bounded) for the
answer on a reply key (``workers.api.replies``), never polling:

* ``/train`` records the job and queues it to wait itself
  (``workers.intake.accept_submission``, the path of ``trainscaler.submit``);
  201 with the job's key. ``wait`` is accepted and unused: the job is recorded
  before the answer.
* ``/job`` pushes the report into the SchedulerQueue itself, in one Lua call
  (``workers.intake.accept_report``, the path of ``trainscaler.report_epoch``),
  triggers ``trainscaler.schedule`` when no run is on its way, and waits for
  the decision: 200 with the parallelism to use next, else 202 with the URL to
  poll (the decision is made all the same). 503 when the queue is full.
* ``/finish`` -> ``trainscaler.finish`` (the control queue); 200 once
  forgotten, else 202; 404 for an unknown job.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Response, status
from starlette.concurrency import run_in_threadpool

from scheduler_core.models import TrainRequest, TrainTask
from workers.adapters.redis_queue import QueueFullError
from workers.api.auth import require_token
from workers.api.context import ApiContext, context
from workers.api.identity_checks import require_job_ref, require_namespace, require_scope
from workers.api.schemas import FinishAnswer, ReportAnswer, TrainAnswer
from workers.api.text_checks import require_utf8
from workers.api.views import resolve_job
from workers.client import new_submission_id, report_from_task
from workers.intake import (
    DecisionReply,
    FinishReply,
    accept_report,
    accept_submission,
    new_reply_key,
)
from workers.targets import NoTargetError

# KubeML: a job's parameter server blocks on this answer between epochs, so
# the wait is short and bounded; past it the caller polls the job's URL.
MAX_WAIT_S = 10.0
DEFAULT_WAIT_S = 2.0

router = APIRouter(tags=["kubeml"], dependencies=[Depends(require_token)])
Ctx = Annotated[ApiContext, Depends(context)]
Wait = Annotated[
    float,
    Query(ge=0, le=MAX_WAIT_S, description="Seconds to wait for the runtime to act."),
]


def _job_url(job: str) -> str:
    # Header values must be Latin-1: percent-encode whatever a job id holds.
    return f"/jobs/{quote(job, safe='/')}"


@router.post("/train", status_code=status.HTTP_201_CREATED)
async def train(
    request: TrainRequest, ctx: Ctx, *, response: Response, wait: Wait = DEFAULT_WAIT_S
) -> TrainAnswer:
    """KubeML ``CreateTask``: submit a train request; the answer carries the job id.

    422 when the request could never be scaled: no ``ps_url`` and no ElasticJob
    for its key (``workers.targets``).
    """
    require_utf8(body=request)
    require_scope(ctx.settings, request.namespace, field="body.namespace")
    rt = ctx.runtime
    submission = new_submission_id()
    try:
        job = await run_in_threadpool(
            lambda: accept_submission(
                rt, request, submission_id=submission, trigger=ctx.producer.schedule
            )
        )
    except NoTargetError as error:
        raise HTTPException(status_code=422, detail=str(error)) from None
    except QueueFullError as error:
        raise HTTPException(status_code=503, detail=str(error)) from None
    response.headers["Location"] = _job_url(job)
    return TrainAnswer(
        job=job,
        job_id=job.rsplit("/", 1)[-1],
        task_id=submission,
        recorded=True,
        poll=_job_url(job),
    )


@router.post(
    "/job",
    responses={202: {"model": ReportAnswer, "description": "queued, not decided yet"}},
)
async def report_epoch(
    task: TrainTask, ctx: Ctx, *, response: Response, wait: Wait = DEFAULT_WAIT_S
) -> ReportAnswer:
    """KubeML ``UpdateTask``: a job's end-of-epoch report (parallelism, elapsed time)."""
    require_utf8(body=task)
    rt = ctx.runtime
    report = report_from_task(task, at=rt.clock.now())
    job = report.job
    require_scope(ctx.settings, job.partition("/")[0], field="body.job_id")
    reply_to = new_reply_key(rt) if wait > 0 else None
    try:
        queued = await run_in_threadpool(
            lambda: accept_report(rt, report, trigger=ctx.producer.schedule, reply_to=reply_to)
        )
    except QueueFullError as error:
        raise HTTPException(status_code=503, detail=str(error)) from None
    raw = None if reply_to is None else await ctx.replies.wait(reply_to, timeout=wait)
    if raw is None:
        response.status_code = status.HTTP_202_ACCEPTED
        return ReportAnswer(job=job, decided=False, poll=_job_url(job))
    reply = DecisionReply.model_validate_json(raw)
    generation, reason = reply.generation, reply.reason
    if generation is None:
        # Decided on, but by no decision of its own (the cluster policy owns the
        # job, or nothing changed): the job's newest decision says why it runs so.
        newest = await run_in_threadpool(lambda: rt.store.decisions(job, limit=1))
        if newest:
            generation, reason = newest[0].generation, newest[0].decision.reason
    return ReportAnswer(
        job=job,
        decided=True,
        parallelism=reply.parallelism if reply.parallelism is not None else queued.replicas,
        reason=reason,
        generation=generation,
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
    *,
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
    reply_to = new_reply_key(ctx.runtime) if wait > 0 else None
    sent = await run_in_threadpool(lambda: ctx.producer.finish(job, reply_to=reply_to))
    raw = None if reply_to is None else await ctx.replies.wait(reply_to, timeout=wait)
    at = None if raw is None else FinishReply.model_validate_json(raw).finished_at
    if at is None:
        response.status_code = status.HTTP_202_ACCEPTED
    return FinishAnswer(job=job, finished=at is not None, finished_at=at, task_id=sent)
