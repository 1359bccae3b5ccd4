"""The KubeML listener's request/response pairs over real HTTP, against real Redis.

No worker runs here: what a route queued stays where it was put (a report or
a submission in the SchedulerQueue, with the one ``trainscaler.schedule`` that
triggers its decision; a finish in the broker's list), so "nothing recorded"
is checked on the real Redis (no message, no queue item, no job record). Each expected answer is KubeML's scheduler's (``ml/pkg/scheduler/api.go``):
200 with the plain id for ``/train``, 200 and an empty body for ``/job`` and
``/finish``, 500 with ``http.Error``'s text for what it cannot take, 404/405
as gorilla/mux answers. No request carries a token.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
import redis

from scheduler_core.models import TrainRequest
from tests.integration.api_fixtures import ServedApi
from tests.integration.conftest import BASE_ENV, PREFIX, settings_for
from tests.integration.http_stub import serving
from workers.adapters.redis_queue import TRAIN, WAIT, RedisSchedulerQueue
from workers.adapters.redis_server import free_port
from workers.adapters.state_store import JobRecord, ScheduleCursor, StateStore
from workers.api.kubeml_compat import KubemlConfigError, create_kubeml_app
from workers.settings import Settings
from workers.wiring import Runtime

pytestmark = pytest.mark.timeout(120)

PS_URL = "http://kubeml-ps.kubeml:10300"
GO_TEXT = "text/plain; charset=utf-8"
DECODE_FAILED = b"Failed to decode the request\n"

# What Go's json.Marshal writes for KubeML's api.TrainRequest.
GO_TRAIN_REQUEST: dict[str, Any] = {
    "model_type": "resnet34",
    "batch_size": 128,
    "epochs": 10,
    "dataset": "cifar10",
    "lr": 0.01,
    "function_name": "resnet",
    "options": {
        "default_parallelism": 2,
        "static_parallelism": False,
        "validate_every": 1,
        "k": 8,
        "goal_accuracy": 90,
    },
}


def queued(client: redis.Redis) -> list[tuple[str, list[Any]]]:
    """Every Celery message waiting in the broker: (task name, args)."""
    messages = []
    for name in ("events", "control", "cluster-writes"):
        for raw in client.lrange(name, 0, -1):
            message = json.loads(raw)
            args, _, _ = json.loads(base64.b64decode(message["body"]))
            messages.append((message["headers"]["task"], args))
    return messages


def submitted(listener: Listener) -> tuple[str, dict[str, Any]]:
    """The one job ``/train`` recorded and queued to wait (key, request as JSON), and the
    one trigger it sent, hinted with that job."""
    (job,) = listener.store.job_names()
    record = listener.store.get_job(job)
    assert record is not None and record.request is not None
    assert RedisSchedulerQueue(listener.redis, prefix=PREFIX).items(WAIT) == [job]
    assert queued(listener.redis) == [("trainscaler.schedule", [[job]])]
    return job, record.request.model_dump(mode="json")


def reported(listener: Listener, job: str) -> dict[str, Any]:
    """The one report ``/job`` pushed into the train queue itself, and the one trigger it
    sent, hinted with that job."""
    (entry,) = RedisSchedulerQueue(listener.redis, prefix=PREFIX).pending_entries(TRAIN, job)
    assert queued(listener.redis) == [("trainscaler.schedule", [[job]])]
    return entry.data


@dataclass
class FakeRouter:
    """Fission's router: records each call, answers a scripted status and body."""

    status: int = 200
    body: bytes = b"[[0.1, 0.9]]"
    calls: list[tuple[str, bytes, str]] = field(default_factory=list)


@pytest.fixture
def router() -> Iterator[tuple[FakeRouter, str]]:
    state = FakeRouter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.calls.append((self.path, body, self.headers.get("Content-Type", "")))
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    with serving(Handler) as base:
        yield state, base


def kubeml_settings(redis_url: str, **extra: str) -> Settings:
    return settings_for(
        {
            **BASE_ENV,
            "TRAINSCALER_REDIS_URL": redis_url,
            "TRAINSCALER_KUBEML_API_ENABLED": "true",
            "TRAINSCALER_PS_URL": PS_URL,
            "TRAINSCALER_KUBEML_MAX_PARALLELISM": "6",
            **extra,
        }
    )


@dataclass
class Listener:
    url: str
    settings: Settings
    redis: redis.Redis
    store: StateStore

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=15.0)

    def record(self, job_id: str) -> str:
        """A job as /train records it (the worker's part, done by hand here)."""
        request = TrainRequest(
            model_type="resnet34",
            batch_size=128,
            epochs=10,
            dataset="cifar10",
            namespace="kubeml",
            max_replicas=6,
            ps_url=PS_URL,
        )
        job = f"kubeml/{job_id}"
        self.store.save_job(JobRecord(job=job, job_id=job_id, policy="throughput", request=request))
        return job


@pytest.fixture
def listener(
    redis_url: str, redis_client: redis.Redis, router: tuple[FakeRouter, str]
) -> Iterator[Listener]:
    settings = kubeml_settings(redis_url, TRAINSCALER_KUBEML_ROUTER_URL=router[1])
    app = create_kubeml_app(settings, runtime=Runtime(settings))
    app.state.kubeml.finish_wait_s = 0.2  # no worker here: the finish stays queued
    with ServedApi(app) as served:
        yield Listener(
            url=served.url,
            settings=settings,
            redis=redis_client,
            store=StateStore(redis_client, prefix=PREFIX),
        )


# --- POST /train -----------------------------------------------------------------------------


def test_train_answers_200_with_the_plain_task_id(listener: Listener) -> None:
    with listener.http() as http:
        answer = http.post("/train", json=GO_TRAIN_REQUEST)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == GO_TEXT
    job_id = answer.text
    assert len(job_id) == 12 and int(job_id, 16) >= 0  # the whole body is the id
    job, request = submitted(listener)
    assert job == f"kubeml/{job_id}"
    assert request["model_type"] == "resnet34" and request["learning_rate"] == pytest.approx(0.01)
    assert request["options"]["default_parallelism"] == 2
    # KubeML mode: the scheduler-wide psUrl, KubeML's namespace, bounds [1, max].
    assert (request["ps_url"], request["namespace"]) == (PS_URL, "kubeml")
    assert (request["min_replicas"], request["max_replicas"]) == (1, 6)


def test_train_ignores_unknown_fields_and_matches_keys_as_go_does(listener: Listener) -> None:
    body = {
        **{k: v for k, v in GO_TRAIN_REQUEST.items() if k != "model_type"},
        "Model_Type": "lenet",
        "unknown": {"nested": [1, 2]},
        "epochs": None,  # null leaves the earlier value, as Go does
    }
    raw = json.dumps(body).replace('"epochs": null', '"epochs": 3, "epochs": null')
    with listener.http() as http:
        answer = http.post("/train", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    _, request = submitted(listener)
    assert (request["model_type"], request["epochs"]) == ("lenet", 3)


def test_train_takes_go_zero_values_as_not_sent(listener: Listener) -> None:
    body = {"model_type": "m", "batch_size": 1, "epochs": 1, "dataset": "d", "lr": 0}
    body["options"] = {"default_parallelism": 0, "static_parallelism": False}
    with listener.http() as http:
        answer = http.post("/train", json=body)
    assert answer.status_code == 200, answer.text
    _, request = submitted(listener)
    assert request["options"]["default_parallelism"] == 1
    assert request["learning_rate"] == pytest.approx(0.01)
    assert request["function_name"] == ""


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{not json",
        b"[]",
        b'"a string"',
        json.dumps({**GO_TRAIN_REQUEST, "batch_size": "128"}).encode(),
        json.dumps({**GO_TRAIN_REQUEST, "batch_size": 128.5}).encode(),
        json.dumps({**GO_TRAIN_REQUEST, "options": 5}).encode(),
        json.dumps({**GO_TRAIN_REQUEST, "lr": 1e39}).encode(),  # beyond float32
        json.dumps(GO_TRAIN_REQUEST).encode() + b" trailing",
        json.dumps(GO_TRAIN_REQUEST).replace("0.01", "NaN").encode(),
    ],
    ids=[
        "empty",
        "syntax",
        "array",
        "string",
        "quoted-int",
        "fraction-int",
        "options-number",
        "float32-overflow",
        "trailing",
        "nan",
    ],
)
def test_train_refuses_what_go_cannot_decode(listener: Listener, raw: bytes) -> None:
    with listener.http() as http:
        answer = http.post("/train", content=raw, headers={"Content-Type": "application/json"})
    assert (answer.status_code, answer.content) == (500, DECODE_FAILED)
    assert answer.headers["content-type"] == GO_TEXT
    assert queued(listener.redis) == []


@pytest.mark.parametrize(
    "change",
    [
        {"batch_size": 0},
        {"epochs": 0},
        {"epochs": -3},
        {"model_type": ""},
        {"dataset": ""},
        {"lr": -0.1},
        {"options": {"default_parallelism": -1}},
        {"options": {"goal_accuracy": 101}},
    ],
    ids=lambda c: json.dumps(c),
)
def test_train_refuses_a_request_that_cannot_be_valid(
    listener: Listener, change: dict[str, Any]
) -> None:
    with listener.http() as http:
        answer = http.post("/train", json={**GO_TRAIN_REQUEST, **change})
    assert answer.status_code == 500
    assert answer.text.startswith("Invalid train request: ") and answer.text.endswith("\n")
    assert queued(listener.redis) == [] and listener.store.job_names() == []


def test_train_with_a_null_body_is_all_zero_and_refused(listener: Listener) -> None:
    with listener.http() as http:
        answer = http.post("/train", content=b"null")
    assert answer.status_code == 500 and answer.text.startswith("Invalid train request")
    assert queued(listener.redis) == []


# --- POST /job -------------------------------------------------------------------------------


def go_train_task(job_id: str, *, parallelism: int, elapsed: float) -> dict[str, Any]:
    return {
        "request": GO_TRAIN_REQUEST,
        "job": {"id": job_id, "state": {"parallelism": parallelism, "elapsed_time": elapsed}},
    }


def test_job_queues_the_report_and_answers_200_empty(listener: Listener) -> None:
    job = listener.record("a1b2c3d4e5f6")
    body = go_train_task("a1b2c3d4e5f6", parallelism=2, elapsed=12.5)
    body["job"]["pod"] = {"metadata": {"creationTimestamp": None}}  # not modelled: ignored
    with listener.http() as http:
        answer = http.post("/job", json=body)
    assert (answer.status_code, answer.content) == (200, b"")
    report = reported(listener, job)
    assert report["job"] == job
    assert (report["replicas"], report["epoch_time_s"], report["epoch"]) == (2, 12.5, 1)
    assert report["total_epochs"] == 10


def test_job_numbers_epochs_after_the_newest_decided_one(listener: Listener) -> None:
    job = listener.record("e2")
    cursor = ScheduleCursor(last_seq=4, last_target=3, last_epoch=4)
    listener.redis.set(listener.store.job_key(job, "schedule"), cursor.model_dump_json())
    with listener.http() as http:
        answer = http.post("/job", json=go_train_task("e2", parallelism=3, elapsed=9.0))
    assert answer.status_code == 200
    assert reported(listener, job)["epoch"] == 5


def test_job_takes_a_zero_state_as_not_sent(listener: Listener) -> None:
    job = listener.record("zero0state00")
    cursor = ScheduleCursor(last_seq=1, last_target=3, last_epoch=None)
    listener.redis.set(listener.store.job_key(job, "schedule"), cursor.model_dump_json())
    with listener.http() as http:
        answer = http.post("/job", json={"job": {"id": "zero0state00", "state": {}}})
    assert (answer.status_code, answer.content) == (200, b"")
    report = reported(listener, job)
    # Parallelism 0: the job runs what was decided last; elapsed 0: no epoch time.
    assert (report["replicas"], report["epoch_time_s"]) == (3, None)


@pytest.mark.parametrize(
    "body",
    [
        {"request": GO_TRAIN_REQUEST},
        {"job": {"id": "", "state": {"parallelism": 2, "elapsed_time": 1.0}}},
        {"job": {"id": "never-issued", "state": {"parallelism": 2, "elapsed_time": 1.0}}},
        {"job": {"id": "ns/known", "state": {"parallelism": 2, "elapsed_time": 1.0}}},
        {"job": {"id": "x" * 254, "state": {"parallelism": 2, "elapsed_time": 1.0}}},
        {"job": {"id": "known", "state": {"parallelism": -1, "elapsed_time": 1.0}}},
        {"job": {"id": "known", "state": {"parallelism": 2, "elapsed_time": -4.0}}},
        {"job": {"id": "known", "state": {"parallelism": "2"}}},
        {"job": {"id": 7}},
    ],
    ids=[
        "no-job",
        "empty-id",
        "unknown-id",
        "slash-id",
        "long-id",
        "negative-parallelism",
        "negative-time",
        "quoted-parallelism",
        "numeric-id",
    ],
)
def test_job_refuses_what_cannot_be_a_report_of_a_known_job(
    listener: Listener, body: dict[str, Any]
) -> None:
    listener.record("known")
    with listener.http() as http:
        answer = http.post("/job", json=body)
    assert answer.status_code == 500
    assert answer.headers["content-type"] == GO_TEXT and answer.text.endswith("\n")
    assert queued(listener.redis) == []


def test_job_of_a_finished_job_is_refused(listener: Listener) -> None:
    job = listener.record("done")
    record = listener.store.get_job(job)
    assert record is not None
    listener.store.save_job(record.model_copy(update={"finished_at": 1.0}))
    with listener.http() as http:
        answer = http.post("/job", json=go_train_task("done", parallelism=2, elapsed=1.0))
    assert answer.status_code == 500 and queued(listener.redis) == []


# --- DELETE /finish/{taskId} -------------------------------------------------------------------


def test_finish_of_a_known_job_queues_the_finish_and_answers_200(listener: Listener) -> None:
    job = listener.record("f1")
    with listener.http() as http:
        answer = http.delete("/finish/f1")
    assert (answer.status_code, answer.content) == (200, b"")
    ((task, (finished, reply_to)),) = queued(listener.redis)
    assert (task, finished) == ("trainscaler.finish", job)
    # The listener waited for the answer on a reply key; nothing answered (no worker).
    assert reply_to.startswith(f"{PREFIX}reply:") and not listener.redis.exists(reply_to)


def test_finish_of_an_unknown_job_is_200_and_queues_nothing(listener: Listener) -> None:
    with listener.http() as http:
        answer = http.delete("/finish/nobody")
    assert (answer.status_code, answer.content) == (200, b"")
    assert queued(listener.redis) == []


# --- POST /infer ---------------------------------------------------------------------------------


def test_infer_relays_the_functions_answer_with_200(
    listener: Listener, router: tuple[FakeRouter, str]
) -> None:
    fake, _ = router
    fake.status, fake.body = 502, b'{"error": "function failed"}'
    raw = json.dumps({"model_id": "a1b2c3", "data": [[1.0, 2.0]], "extra": True}).encode()
    with listener.http() as http:
        answer = http.post("/infer", content=raw, headers={"Content-Type": "application/json"})
    # KubeML's scheduler relays the function's body with 200, whatever it answered.
    assert (answer.status_code, answer.content) == (200, fake.body)
    ((path, body, content_type),) = fake.calls
    assert path == "/network?N=1&batchSize=0&funcId=0&jobId=a1b2c3&lr=1&task=infer"
    assert (body, content_type) == (raw, "application/json")
    assert queued(listener.redis) == []


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"model_id": "m", "data": {"a": 1}}', b'{"model_id": 5}', b'{"data": [1]}'],
    ids=["syntax", "data-object", "numeric-id", "no-model-id"],
)
def test_infer_refuses_what_cannot_be_an_infer_request(
    listener: Listener, router: tuple[FakeRouter, str], raw: bytes
) -> None:
    with listener.http() as http:
        answer = http.post("/infer", content=raw)
    assert answer.status_code == 500 and answer.text.endswith("\n")
    assert router[0].calls == []


def test_infer_without_the_router_is_500(redis_url: str, redis_client: redis.Redis) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    settings = kubeml_settings(redis_url, TRAINSCALER_KUBEML_ROUTER_URL=gone)
    with ServedApi(create_kubeml_app(settings, runtime=Runtime(settings))) as served:
        answer = httpx.post(f"{served.url}/infer", json={"model_id": "m", "data": []})
    assert (answer.status_code, answer.content) == (500, b"Failed to receive function response\n")


# --- the rest --------------------------------------------------------------------------------


def test_health_methods_and_unknown_paths_answer_as_gorilla_mux(listener: Listener) -> None:
    with listener.http() as http:
        health = http.get("/health")
        wrong_method = http.get("/train")
        unknown = http.post("/scheduleTrainTask", json={})
        finish_post = http.post("/finish/x")
        slash = http.post("/train/", json=GO_TRAIN_REQUEST)
        no_id = http.delete("/finish/")
    assert (health.status_code, health.content) == (200, b"")
    assert (wrong_method.status_code, wrong_method.content) == (405, b"")
    assert (finish_post.status_code, finish_post.content) == (405, b"")
    assert (unknown.status_code, unknown.content) == (404, b"404 page not found\n")
    assert unknown.headers["content-type"] == GO_TEXT
    assert (slash.status_code, no_id.status_code) == (404, 404)
    assert queued(listener.redis) == []


def test_the_listener_starts_only_when_enabled_and_with_a_parameter_server(
    redis_url: str,
) -> None:
    with pytest.raises(KubemlConfigError, match="KUBEML_API_ENABLED"):
        create_kubeml_app(kubeml_settings(redis_url, TRAINSCALER_KUBEML_API_ENABLED="false"))
    settings = kubeml_settings(redis_url).model_copy(update={"ps_url": None})
    with pytest.raises(KubemlConfigError, match="PS_URL"):
        create_kubeml_app(settings)
