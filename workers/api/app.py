"""The API's application factory: ``create_app(settings) -> FastAPI``.

Composes the runtime's adapters (``workers.wiring.Runtime``), the Celery
producer, an explicit Prometheus ``CollectorRegistry`` (state gauges read
from Redis at scrape time plus this process's request and runtime counters), the
middleware, the error handlers and the routers. Nothing is read from the
environment here: settings come in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from workers.api import inspect_routes, kubeml, ops_routes
from workers.api.auth import check_auth_settings
from workers.api.context import ApiContext, Probe, TaskProducer
from workers.api.errors import install_error_handlers
from workers.api.health import default_probes
from workers.api.middleware import BodySizeLimitMiddleware, RequestIdMiddleware
from workers.api.replies import ReplyWaiter
from workers.client import CeleryClient
from workers.observability.metrics import ApiMetrics
from workers.observability.runtime_gauges import RuntimeCollector
from workers.settings import Settings
from workers.wiring import Runtime

DESCRIPTION = """\
KubeML's scheduler API for elastic training jobs (`POST /train`, `POST /job`,
`DELETE /finish/{taskId}`, `GET /health`), plus read-only views of the
runtime: jobs with their decisions and reasons, the planner's newest plan, the
queues and Prometheus metrics. Send `Authorization: Bearer <TRAINSCALER_API_TOKEN>`;
`/health` and `/metrics` are open.
"""


def create_app(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    producer: TaskProducer | None = None,
    probes: dict[str, Probe] | None = None,
    registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The FastAPI application; every collaborator can be passed in (tests, embedding)."""
    check_auth_settings(settings)
    rt = runtime or Runtime(settings)
    owned: CeleryClient | None = None
    if producer is None:
        owned = producer = CeleryClient(settings)
    registry = registry or CollectorRegistry(auto_describe=False)
    api_metrics = ApiMetrics(registry)
    registry.register(
        RuntimeCollector(
            store=rt.store,
            queue=rt.queue,
            dead_letters=rt.dead_letters,
            clock=rt.clock,
            celery_broker=rt.redis,
        )
    )
    # This process's own runtime counters (e.g. the Kubernetes requests its views make).
    registry.register(rt.metrics.registry)

    replies = ReplyWaiter(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await replies.aclose()
        # The producer this app built is closed with it; one passed in is the caller's.
        if owned is not None:
            owned.close()

    app = FastAPI(title="trainscaler", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.context = ApiContext(
        settings=settings,
        runtime=rt,
        producer=producer,
        registry=registry,
        api_metrics=api_metrics,
        replies=replies,
        probes=probes if probes is not None else default_probes(settings, rt),
    )
    install_error_handlers(app)
    # Added inner first: the request-id middleware wraps everything, 413s included.
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=settings.api_max_body_bytes)
    app.add_middleware(RequestIdMiddleware, metrics=api_metrics)
    app.include_router(kubeml.router)
    app.include_router(inspect_routes.router)
    app.include_router(ops_routes.router)
    return app
