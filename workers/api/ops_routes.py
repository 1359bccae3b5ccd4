"""Operational routes: ``GET /health`` (open, the readiness probe) and ``GET /metrics``."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from workers.api.context import ApiContext, Probe, context
from workers.api.health import PROBE_TIMEOUT_S
from workers.api.schemas import HealthView

log = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])
Ctx = Annotated[ApiContext, Depends(context)]


async def _check(name: str, probe: Probe) -> str:
    try:
        # An executor future, not anyio's thread runner: that one cannot be
        # abandoned, so a hung probe would hold the request past the limit.
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.run_in_executor(None, probe), timeout=PROBE_TIMEOUT_S)
    except TimeoutError:
        return f"unreachable: no answer within {PROBE_TIMEOUT_S:g}s"
    except Exception as error:
        log.warning("health check %s failed: %s", name, error)
        return f"unreachable: {type(error).__name__}: {error}"[:300]
    return "ok"


@router.get(
    "/health",
    response_model=HealthView,
    responses={503: {"model": HealthView, "description": "a part is unreachable"}},
)
async def health(ctx: Ctx) -> JSONResponse:
    """200 when Redis and the cluster answer; 503 naming the failing part otherwise."""
    names = list(ctx.probes)
    results = await asyncio.gather(*(_check(n, ctx.probes[n]) for n in names))
    checks = dict(zip(names, results, strict=True))
    failing = [n for n, result in checks.items() if result != "ok"]
    view = HealthView(status="ok" if not failing else "unavailable", checks=checks, failing=failing)
    return JSONResponse(status_code=503 if failing else 200, content=view.model_dump())


@router.get("/metrics", response_class=Response)
async def metrics(ctx: Ctx) -> Response:
    """Prometheus text format: state gauges read from Redis now, and this API process's counters."""
    body = await run_in_threadpool(generate_latest, ctx.registry)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
