"""KubeML's scheduler API as KubeML's own components call it (``trainscaler kubeml-api``).

A listener of its own (port 10200, KubeML's scheduler port), separate from the
token-protected API: KubeML's controller, parameter server and train jobs send
no ``Authorization`` header, so the shipped manifests put this listener
behind a NetworkPolicy that admits only KubeML's pods (deploy/kubeml-api.yaml),
and it refuses to start unless ``TRAINSCALER_KUBEML_API_ENABLED=true``.

Routes, bodies and statuses are those of KubeML's scheduler
(``ml/pkg/scheduler/api.go``; its clients in ``ml/pkg/scheduler/client/client.go``):

* ``POST /train`` with a ``TrainRequest`` -> 200, the body being the new job's
  id as plain text (the controller's ``sendTask`` reads the whole body as the id);
* ``POST /job`` with a ``TrainTask`` (``{"request", "job": {"id", "state"}}``)
  -> 200, empty: the report is pushed into the SchedulerQueue (the API's own
  path, ``workers.intake``); the answer goes to the job's parameter server as
  a ``JobState`` on ``/update/{id}`` (``workers.adapters.parameter_server``);
* ``POST /infer`` with an ``InferRequest`` -> the Fission function's answer,
  relayed with 200, as KubeML's scheduler does;
* ``DELETE /finish/{taskId}`` -> 200, empty: the job is forgotten;
* ``GET /health`` -> 200, empty (503 when Redis does not answer).

Bodies are decoded as Go's ``json.Unmarshal`` does (``workers.adapters.kubeml_wire``)
and then converted into the core's models, which validate: a body Go could not
decode, or one that cannot be a valid KubeML request (bounds, identity, an id
this scheduler never issued), gets KubeML's error answer (500, a one-line text
as ``http.Error`` writes it) and nothing is queued or recorded. An unknown
path is 404 and a known path with another method 405, as gorilla/mux answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import redis
from kombu.exceptions import OperationalError
from prometheus_client import CollectorRegistry
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from scheduler_core.models import TaskState, TrainRequest, TrainTask, job_key
from workers.adapters.kubeml_wire import (
    INFER_REQUEST,
    TRAIN_REQUEST,
    TRAIN_TASK,
    GoDecodeError,
    decode,
)
from workers.adapters.redis_queue import QueueFullError
from workers.api.context import TaskProducer
from workers.api.middleware import BodySizeLimitMiddleware, RequestIdMiddleware
from workers.api.replies import ReplyWaiter
from workers.client import CeleryClient, new_submission_id, report_from_task
from workers.deadletters import validation_message
from workers.intake import OutOfScope, accept_report, accept_submission, new_reply_key
from workers.observability.metrics import ApiMetrics
from workers.settings import Settings
from workers.targets import NoTargetError
from workers.wiring import Runtime

log = logging.getLogger(__name__)

# What Go's net/http sends for http.Error and for sniffed plain-text bodies.
GO_TEXT = "text/plain; charset=utf-8"
DECODE_FAILED = "Failed to decode the request"
INFER_FAILED = "Failed to receive function response"
# KubeML's taskFinished answers once the job is forgotten; trainscaler waits this long for it.
FINISH_WAIT_S = 5.0
MAX_ID_LENGTH = 253


class KubemlConfigError(ValueError):
    """The settings do not allow the KubeML listener to start safely."""


def check_kubeml_settings(settings: Settings) -> None:
    if not settings.kubeml_api_enabled:
        raise KubemlConfigError(
            "the KubeML listener takes requests without a token: set "
            "TRAINSCALER_KUBEML_API_ENABLED=true only where a NetworkPolicy admits "
            "KubeML's pods alone (deploy/kubeml-api.yaml)"
        )
    if not settings.ps_url:
        raise KubemlConfigError(
            "KubeML mode needs the scheduler-wide parameter server: set TRAINSCALER_PS_URL "
            "(KubeML's psUrl)"
        )


def go_error(message: str, status: int = 500) -> Response:
    """What Go's ``http.Error`` writes: the message and a newline, as plain text."""
    return Response(
        f"{message}\n",
        status_code=status,
        media_type=GO_TEXT,
        headers={"X-Content-Type-Options": "nosniff"},
    )


def go_ok(body: bytes | str = b"") -> Response:
    # Go sniffs a handler's first write: an id or JSON predictions come out as plain text.
    return Response(body, status_code=200, media_type=GO_TEXT if body else None)


@dataclass
class KubemlContext:
    settings: Settings
    runtime: Runtime
    producer: TaskProducer
    http: httpx.AsyncClient
    replies: ReplyWaiter
    finish_wait_s: float = FINISH_WAIT_S


def train_request_from_kubeml(decoded: dict[str, Any], settings: Settings) -> TrainRequest:
    """KubeML's ``TrainRequest`` (Go values) as the core's model; raises ``ValidationError``.

    A Go zero means "not sent": ``lr`` 0 and ``default_parallelism`` 0 take the
    core's defaults. KubeML has no namespaces or replica bounds: every job gets
    ``kubeml_namespace``, bounds [1, ``kubeml_max_parallelism``] and the
    scheduler-wide parameter server (``ps_url``).
    """
    options = dict(decoded["options"])
    if options["default_parallelism"] == 0:
        del options["default_parallelism"]
    fields: dict[str, Any] = {
        "model_type": decoded["model_type"],
        "batch_size": decoded["batch_size"],
        "epochs": decoded["epochs"],
        "dataset": decoded["dataset"],
        "function_name": decoded["function_name"],
        "options": options,
        "namespace": settings.kubeml_namespace,
        "min_replicas": 1,
        "max_replicas": settings.kubeml_max_parallelism,
        "ps_url": settings.ps_url,
    }
    if decoded["lr"] != 0:
        fields["learning_rate"] = decoded["lr"]
    return TrainRequest.model_validate(fields)


def _ctx(request: Request) -> KubemlContext:
    ctx: KubemlContext = request.app.state.kubeml
    return ctx


async def _decoded(request: Request, go_type: Any) -> dict[str, Any] | Response:
    body = await request.body()
    try:
        return decode(body, go_type)
    except GoDecodeError as error:
        # KubeML logs the payload; trainscaler logs only what was wrong with it.
        log.warning("%s %s: %s", request.method, request.url.path, error)
        return go_error(DECODE_FAILED)


async def train(request: Request) -> Response:
    """KubeML ``train``: queue the request; the body of the answer is the job id."""
    ctx = _ctx(request)
    decoded = await _decoded(request, TRAIN_REQUEST)
    if isinstance(decoded, Response):
        return decoded
    try:
        train_request = train_request_from_kubeml(decoded, ctx.settings)
    except ValidationError as error:
        return go_error(f"Invalid train request: {validation_message(error)}")
    rt, submission = ctx.runtime, new_submission_id()
    try:
        job = await run_in_threadpool(
            lambda: accept_submission(
                rt, train_request, submission_id=submission, trigger=ctx.producer.schedule
            )
        )
    except (NoTargetError, OutOfScope, QueueFullError) as error:
        return go_error(f"Invalid train request: {error}")
    return go_ok(job.rsplit("/", 1)[-1])


def _identity_problem(job_id: str) -> str | None:
    if not job_id:
        return "job.id is empty"
    if len(job_id) > MAX_ID_LENGTH or "/" in job_id:
        return "job.id is not an id this scheduler issues"
    return None


async def report(request: Request) -> Response:
    """KubeML ``newParallelism``: a train job's end-of-epoch ``TrainTask``, queued."""
    ctx = _ctx(request)
    decoded = await _decoded(request, TRAIN_TASK)
    if isinstance(decoded, Response):
        return decoded
    job_id: str = decoded["job"]["id"]
    problem = _identity_problem(job_id)
    if problem is not None:
        return go_error(f"Invalid train task: {problem}")
    rt = ctx.runtime
    job = job_key(ctx.settings.kubeml_namespace, job_id)
    record = await run_in_threadpool(rt.store.get_job, job)
    if record is None or record.request is None or record.finished_at is not None:
        # KubeML would re-create an unknown task; trainscaler only answers jobs it started.
        return go_error("Invalid train task: unknown or finished job id")
    cursor = await run_in_threadpool(rt.store.cursor, job)
    state = decoded["job"]["state"]
    parallelism: int = state["parallelism"]
    if parallelism == 0:
        # Go zero: not sent. The job runs with what was decided last.
        parallelism = cursor.last_target or record.request.options.default_parallelism
    # KubeML's job sends one report per epoch and waits for the answer, so its
    # epoch is the newest decided one plus one: a redelivered report is then
    # recognised and decided once.
    epoch = (cursor.last_epoch or 0) + 1
    try:
        # The request recorded at /train is the job's; the one in the body is KubeML's copy.
        task = TrainTask(
            job_id=job_id,
            parameters=record.request,
            state=TaskState(
                parallelism=parallelism,
                elapsed_time=state["elapsed_time"] or None,
                epoch=epoch,
            ),
        )
    except ValidationError as error:
        return go_error(f"Invalid train task: {validation_message(error)}")
    epoch_report = report_from_task(task, at=rt.clock.now())
    try:
        await run_in_threadpool(
            lambda: accept_report(rt, epoch_report, trigger=ctx.producer.schedule)
        )
    except (OutOfScope, QueueFullError) as error:
        return go_error(f"Invalid train task: {error}")
    return go_ok()


async def finish(request: Request) -> Response:
    """KubeML ``taskFinished``: forget the job; 200 whether or not it was known."""
    ctx = _ctx(request)
    task_id = str(request.path_params["task_id"])
    if _identity_problem(task_id) is not None:
        return go_ok()  # nothing of that name: nothing to forget
    store = ctx.runtime.store
    job = job_key(ctx.settings.kubeml_namespace, task_id)
    record = await run_in_threadpool(store.get_job, job)
    if record is None or record.finished_at is not None:
        return go_ok()
    reply_to = new_reply_key(ctx.runtime)
    await run_in_threadpool(lambda: ctx.producer.finish(job, reply_to=reply_to))
    await ctx.replies.wait(reply_to, timeout=ctx.finish_wait_s)
    return go_ok()


def infer_url(settings: Settings, model_id: str) -> str:
    """KubeML's ``buildFunctionURL(0, 1, "infer", <function>, modelId)`` (keys sorted, as
    Go's ``url.Values.Encode`` writes them)."""
    query = {
        "task": "infer",
        "jobId": model_id,
        "N": "1",
        "funcId": "0",
        "batchSize": "0",
        "lr": "1",
    }
    router = settings.kubeml_router_url.rstrip("/")
    return f"{router}/{settings.kubeml_infer_function}?{urlencode(sorted(query.items()))}"


async def infer(request: Request) -> Response:
    """KubeML ``infer``: the body goes to the model's function; its answer comes back."""
    ctx = _ctx(request)
    body = await request.body()
    try:
        decoded = decode(body, INFER_REQUEST)
    except GoDecodeError as error:
        log.warning("POST /infer: %s", error)
        return go_error(DECODE_FAILED)
    model_id: str = decoded["model_id"]
    if not model_id or len(model_id) > MAX_ID_LENGTH:
        return go_error("Invalid infer request: model_id is empty or too long")
    url = infer_url(ctx.settings, model_id)
    try:
        answer = await ctx.http.post(
            url, content=body, headers={"Content-Type": "application/json"}
        )
        predictions = answer.content
    except httpx.HTTPError as error:
        log.warning("POST /infer: %s: %s", url, error)
        return go_error(INFER_FAILED)
    # KubeML relays the function's body with 200 whatever the function answered.
    return go_ok(predictions)


async def health(request: Request) -> Response:
    rt = _ctx(request).runtime
    try:
        alive = await asyncio.wait_for(run_in_threadpool(rt.redis.ping), timeout=3.0)
    except (redis.RedisError, TimeoutError) as error:
        return go_error(f"redis unavailable: {error}", 503)
    return go_ok() if alive else go_error("redis unavailable", 503)


async def not_found(request: Request, error: Exception) -> Response:
    status = error.status_code if isinstance(error, HTTPException) else 404
    if status == 405:
        return Response(status_code=405)  # gorilla/mux: no body
    return go_error("404 page not found", 404)


async def unavailable(request: Request, error: Exception) -> Response:
    log.warning("%s %s: %s", request.method, request.url.path, error)
    return go_error(f"scheduler unavailable: {type(error).__name__}")


ROUTES = [
    Route("/train", train, methods=["POST"]),
    Route("/job", report, methods=["POST"]),
    Route("/infer", infer, methods=["POST"]),
    Route("/finish/{task_id}", finish, methods=["DELETE"]),
    Route("/health", health, methods=["GET"]),
]


def create_kubeml_app(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    producer: TaskProducer | None = None,
    http: httpx.AsyncClient | None = None,
) -> Starlette:
    """The KubeML-compatible listener; collaborators can be passed in (tests)."""
    check_kubeml_settings(settings)
    rt = runtime or Runtime(settings)
    owned_producer: CeleryClient | None = None
    if producer is None:
        owned_producer = producer = CeleryClient(settings)
    owned_http = http is None
    client = http or httpx.AsyncClient(timeout=settings.kubeml_infer_timeout)
    replies = ReplyWaiter(settings)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await replies.aclose()
        if owned_producer is not None:
            owned_producer.close()
        if owned_http:
            await client.aclose()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        exception_handlers={
            404: not_found,
            405: not_found,
            redis.RedisError: unavailable,
            OperationalError: unavailable,
        },
    )
    # gorilla/mux (no StrictSlash): "/train/" is another path, a 404, not a redirect.
    app.router.redirect_slashes = False
    app.state.kubeml = KubemlContext(
        settings=settings, runtime=rt, producer=producer, http=client, replies=replies
    )
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=settings.api_max_body_bytes)
    app.add_middleware(RequestIdMiddleware, metrics=ApiMetrics(CollectorRegistry()))
    return app
