"""Read-only routes: ``GET /jobs``, ``GET /jobs/{id}``, ``GET /plan``, ``GET /queue``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from starlette.concurrency import run_in_threadpool

from workers.api.auth import require_token
from workers.api.context import ApiContext, context
from workers.api.identity_checks import require_job_ref, require_namespace, require_scope
from workers.api.schemas import JobDetail, JobSummary, PlanView, QueueView
from workers.api.text_checks import require_utf8
from workers.api.views import find_job, job_detail, list_jobs, newest_plan, queue_view

router = APIRouter(tags=["inspect"], dependencies=[Depends(require_token)])
Ctx = Annotated[ApiContext, Depends(context)]


@router.get("/jobs")
async def jobs(ctx: Ctx) -> list[JobSummary]:
    """Every job: recorded ones and the cluster's ElasticJobs, with state and newest reason."""
    listed = await run_in_threadpool(list_jobs, ctx.runtime)
    allowed = ctx.settings.namespace_allowed
    return [summary for summary in listed if allowed(summary.job.partition("/")[0])]


@router.get("/jobs/{job_id:path}", responses={404: {"description": "unknown job"}})
async def job(
    job_id: str,
    ctx: Ctx,
    *,
    namespace: Annotated[str | None, Query(min_length=1, max_length=253)] = None,
) -> JobDetail:
    """One job: replicas, fulfillment, recent epoch times and throughput, decisions with reasons."""
    require_utf8(path=job_id, query=namespace)
    require_job_ref(job_id, loc=("path", "job_id"))
    require_namespace(namespace, loc=("query", "namespace"))
    rt = ctx.runtime
    key = await run_in_threadpool(lambda: find_job(rt, job_id, namespace=namespace))
    if key is None:
        raise HTTPException(status_code=404, detail=f"unknown job {job_id!r}")
    require_scope(ctx.settings, key.partition("/")[0], field="path.job_id")
    return await run_in_threadpool(job_detail, rt, key)


@router.get("/plan")
async def plan(ctx: Ctx) -> PlanView:
    """The planner's newest autoscale round: each decision with its reason, and the cluster."""
    found = await run_in_threadpool(lambda: newest_plan(ctx.runtime))
    if found is None:
        raise HTTPException(status_code=404, detail="no autoscale round yet")
    return found


@router.get("/queue")
async def queue(
    ctx: Ctx,
    dead_letters: Annotated[int, Query(ge=0, le=1000)] = 10,
) -> QueueView:
    """Depth, in-flight count and oldest age per queue; Celery queue depths; dead letters."""
    return await run_in_threadpool(lambda: queue_view(ctx.runtime, dead_letters=dead_letters))
