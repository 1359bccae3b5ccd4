"""KubeML parameter-server mode against a small real HTTP server that records calls.

The server answers from a script of statuses (then 200), so tests can fail
some calls; the runtime's ``scale`` path must retry transient failures, give
up on permanent ones, and send ``CreateTask`` once, then ``UpdateTask``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
import redis

from scheduler_core.models import Reason, TrainRequest
from scheduler_core.ports import (
    PermanentScaleError,
    ScaleOutcome,
    ScaleRequest,
    TransientScaleError,
)
from tests.integration.conftest import PREFIX, wait_for
from tests.integration.http_stub import serving
from tests.unit.builders import scale_request
from workers.adapters.parameter_server import (
    ParameterServerRouter,
    ParameterServerScaler,
    with_parameter_servers,
)
from workers.adapters.recording_scaler import RecordingScaler
from workers.adapters.state_store import JobRecord, StateStore
from workers.handlers import ScaleCommand, apply_scale, apply_scales
from workers.wiring import Runtime, SystemClock

pytestmark = pytest.mark.timeout(90)


@dataclass
class Call:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    status: int


@dataclass
class FakeParameterServer:
    """Records every POST; answers the next scripted status (200 once the script is empty)."""

    script: list[int] = field(default_factory=list)
    delay_s: float = 0.0
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self.lock:
            status = self.script.pop(0) if self.script else 200
            self.calls.append(Call(path=path, body=body, headers=headers, status=status))
        return status

    def succeeded(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.status == 200]


@pytest.fixture
def ps() -> Iterator[tuple[FakeParameterServer, str]]:
    state = FakeParameterServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if state.delay_s:
                time.sleep(state.delay_s)
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            status = state.answer(self.path, body, dict(self.headers.items()))
            data = json.dumps({"ok": status == 200}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    with serving(Handler) as base:
        yield state, f"{base}/ps"


def _record(store: StateStore, job_id: str, ps_url: str | None) -> str:
    request = TrainRequest(
        model_type="lenet",
        batch_size=64,
        epochs=5,
        dataset="mnist",
        namespace="ml",
        max_replicas=8,
        ps_url=ps_url,
    )
    job = f"ml/{job_id}"
    store.save_job(JobRecord(job=job, job_id=job_id, policy="throughput", request=request))
    return job


def test_first_decision_starts_the_task_later_ones_update_it(redis_client, ps) -> None:
    server, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    job = _record(store, "job-1", url)
    scaler = ParameterServerScaler(store, timeout=2.0)
    assert scaler.current_replicas(job) == 0
    assert (
        scaler.scale(scale_request(job, 3, reason="gen 1 throughput.start: first contact")).after
        == 3
    )
    assert scaler.current_replicas(job) == 3
    assert scaler.scale(scale_request(job, 5, reason="gen 2 throughput.up: faster")).after == 5
    assert (
        scaler.scale(scale_request(job, 5, reason="gen 3 confirm")).after == 5
    )  # in force: nothing sent
    start, update = server.calls
    assert start.path == "/ps/start" and update.path == "/ps/update/job-1"
    # KubeML's TrainTask (ml/pkg/api/types.go) under its JSON names, nothing else.
    assert start.body == {
        "request": {
            "model_type": "lenet",
            "batch_size": 64,
            "epochs": 5,
            "dataset": "mnist",
            "lr": 0.01,
            "function_name": "",
            "options": {
                "default_parallelism": 1,
                "static_parallelism": False,
                "validate_every": 0,
                "k": -1,
                "goal_accuracy": 100.0,
            },
        },
        "job": {"id": "job-1", "state": {"parallelism": 3, "elapsed_time": 0.0}},
    }
    # KubeML's ps client posts only the JobState to /update/{id}.
    assert update.body == {"parallelism": 5, "elapsed_time": 0.0}
    assert start.headers["Idempotency-Key"] == f"{job}:3:CREATE_TASK"
    assert update.headers["X-Trainscaler-Reason"] == "gen 2 throughput.up: faster"
    scaler.close()


def test_every_epoch_answer_is_sent_even_when_the_parallelism_stays(redis_client, ps) -> None:
    server, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    job = _record(store, "job-keep", url)
    scaler = ParameterServerScaler(store, timeout=2.0)
    scaler.scale(scale_request(job, 2, generation=1, reason="create"))
    scaler.scale(scale_request(job, 2, generation=2, epoch_time_s=41.5, reason="keep"))
    scaler.scale(scale_request(job, 2, generation=3, epoch_time_s=40.0, reason="clamped"))
    assert [(c.path, c.body) for c in server.calls] == [
        ("/ps/start", {**server.calls[0].body}),
        ("/ps/update/job-keep", {"parallelism": 2, "elapsed_time": 41.5}),
        ("/ps/update/job-keep", {"parallelism": 2, "elapsed_time": 40.0}),
    ]
    assert server.calls[0].body["job"] == {
        "id": "job-keep",
        "state": {"parallelism": 2, "elapsed_time": 0.0},
    }
    assert [c.headers["Idempotency-Key"] for c in server.calls] == [
        f"{job}:gen1:CREATE_TASK",
        f"{job}:gen2:UPDATE_TASK",
        f"{job}:gen3:UPDATE_TASK",
    ]
    scaler.close()


@pytest.mark.parametrize("status", [500, 502, 503, 429, 409, 408])
def test_transient_answers_keep_the_task_unstarted(redis_client, ps, status: int) -> None:
    server, url = ps
    server.script = [status]
    store = StateStore(redis_client, prefix=PREFIX)
    job = _record(store, "job-t", url)
    scaler = ParameterServerScaler(store, timeout=2.0)
    with pytest.raises(TransientScaleError, match=f"HTTP {status}"):
        scaler.scale(scale_request(job, 2, reason="r"))
    assert scaler.current_replicas(job) == 0
    assert (
        scaler.scale(scale_request(job, 2, reason="r")).after == 2
    )  # the retry still creates the task
    assert [c.path for c in server.calls] == ["/ps/start", "/ps/start"]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_permanent_answers_raise_permanent(redis_client, ps, status: int) -> None:
    server, url = ps
    server.script = [status]
    store = StateStore(redis_client, prefix=PREFIX)
    job = _record(store, "job-p", url)
    with pytest.raises(PermanentScaleError, match=f"HTTP {status}"):
        ParameterServerScaler(store, timeout=2.0).scale(scale_request(job, 2, reason="r"))


def test_unreachable_or_slow_servers_are_transient(redis_client, ps) -> None:
    server, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    server.delay_s = 1.0
    slow = _record(store, "slow", url)
    with pytest.raises(TransientScaleError, match="timed out"):
        ParameterServerScaler(store, timeout=0.2).scale(scale_request(slow, 2, reason="r"))
    from workers.adapters.redis_server import free_port

    gone = _record(store, "gone", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(TransientScaleError, match="unreachable"):
        ParameterServerScaler(store, timeout=1.0).scale(scale_request(gone, 2, reason="r"))


def test_jobs_without_a_usable_ps_url_are_permanent_errors(redis_client) -> None:
    store = StateStore(redis_client, prefix=PREFIX)
    scaler = ParameterServerScaler(store, timeout=1.0)
    with pytest.raises(PermanentScaleError, match="no parameter-server URL"):
        scaler.scale(scale_request("ml/unknown", 2, reason="r"))
    job = _record(store, "ftp", "ftp://example.invalid/x")
    with pytest.raises(PermanentScaleError, match="not an http"):
        scaler.scale(scale_request(job, 2, reason="r"))
    with pytest.raises(PermanentScaleError, match="parallelism >= 1"):
        scaler.scale(scale_request(_record(store, "zero", "http://127.0.0.1:1"), 0, reason="r"))


class CountingScaler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.rules: list[str | None] = []

    def scale(self, request: ScaleRequest) -> ScaleOutcome:
        self.calls.append((request.job, request.replicas))
        self.rules.append(request.reason.rule)
        return ScaleOutcome(job=request.job, before=0, after=request.replicas)


def test_the_router_sends_only_ps_jobs_to_their_server(redis_client, ps) -> None:
    server, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    ps_job = _record(store, "with-ps", url)
    kube_job = _record(store, "without-ps", None)
    default = CountingScaler()
    router = with_parameter_servers(default, store=store)
    assert isinstance(router, ParameterServerRouter)
    router.scale(scale_request(ps_job, 2, reason="r"))
    router.scale(scale_request(kube_job, 4, policy="edl", rule="edl.grow"))
    router.scale(
        scale_request("ml/crd-job", 1, reason="r")
    )  # no record at all: a Kubernetes target
    assert default.calls == [(kube_job, 4), ("ml/crd-job", 1)]
    assert default.rules == ["edl.grow", "test"]  # the decision's rule reaches the scaler
    assert [c.path for c in server.calls] == ["/ps/start"]


def _reads(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {cmd: int(stats.get(f"cmdstat_{cmd}", {}).get("calls", 0)) for cmd in ("get", "mget")}


def test_a_batch_is_routed_with_one_read(redis_client, ps) -> None:
    _, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    ps_job = _record(store, "batch-ps", url)
    kube_job = _record(store, "batch-kube", None)
    default = CountingScaler()
    router = with_parameter_servers(default, store=store)
    assert isinstance(router, ParameterServerRouter)
    before = _reads(redis_client)
    routes = router.routed([ps_job, kube_job, "ml/no-record"])
    after = _reads(redis_client)
    assert routes == {
        ps_job: router.parameter_servers,
        kube_job: default,
        "ml/no-record": default,
    }
    assert (after["get"] - before["get"], after["mget"] - before["mget"]) == (0, 1)


def test_a_mixed_batch_reaches_each_jobs_scaler(redis_client, redis_url, ps) -> None:
    server, url = ps
    from tests.integration.conftest import BASE_ENV, settings_for

    rt = Runtime(settings_for({**BASE_ENV, "TRAINSCALER_REDIS_URL": redis_url}))
    ps_job = _record(rt.store, "mixed-ps", url)
    kube_job = _record(rt.store, "mixed-kube", None)
    for job in (ps_job, kube_job):
        redis_client.set(rt.store.job_key(job, "generation"), 1)
    results = apply_scales(rt, [_command(ps_job, 2, 1), _command(kube_job, 3, 1)])
    assert [r.outcome for r in results] == ["scaled 0 -> 2", "scaled 0 -> 3"]
    assert [(c.path, c.body["job"]["state"]["parallelism"]) for c in server.calls] == [
        ("/ps/start", 2)
    ]
    recorded = RecordingScaler(
        redis_client, prefix=PREFIX, clock=SystemClock(), faults=rt.faults
    ).all_replicas()
    assert recorded == {kube_job: 3}


def _command(job: str, target: int, generation: int) -> ScaleCommand:
    return ScaleCommand(
        job=job,
        target=target,
        generation=generation,
        reason=Reason(rule="throughput.test", message="test"),
        source="schedule",
    )


def test_the_runtime_scale_path_is_idempotent_for_ps_jobs(redis_client, redis_url, ps) -> None:
    server, url = ps
    from tests.integration.conftest import BASE_ENV, settings_for

    rt = Runtime(settings_for({**BASE_ENV, "TRAINSCALER_REDIS_URL": redis_url}))
    job = _record(rt.store, "idem", url)
    redis_client.set(rt.store.job_key(job, "generation"), 2)
    assert apply_scale(rt, _command(job, 3, 1)) == "superseded by generation 2"
    assert apply_scale(rt, _command(job, 3, 2)) == "scaled 0 -> 3"
    assert apply_scale(rt, _command(job, 3, 2)) == "already applied (generation 2)"
    redis_client.set(rt.store.job_key(job, "generation"), 3)
    # A new generation at the same parallelism is still one answer (a keep epoch).
    assert apply_scale(rt, _command(job, 3, 3)) == "already at target"
    assert apply_scale(rt, _command(job, 3, 3)) == "already applied (generation 3)"
    redis_client.set(rt.store.job_key(job, "generation"), 4)
    assert apply_scale(rt, _command(job, 6, 4)) == "scaled 3 -> 6"
    assert [(c.path, c.body["job"]["state"]["parallelism"]) for c in server.calls[:1]] == [
        ("/ps/start", 3)
    ]
    assert [(c.path, c.body) for c in server.calls[1:]] == [
        ("/ps/update/idem", {"parallelism": 3, "elapsed_time": 0.0}),
        ("/ps/update/idem", {"parallelism": 6, "elapsed_time": 0.0}),
    ]


def test_celery_scale_retries_a_failing_parameter_server(procs, client_app, ps) -> None:
    """Submit with a ps_url through the real runtime: two 503s, then the task starts."""
    server, url = ps
    server.script = [503, 503]
    procs.worker("w-ps")
    request = {
        "model_type": "resnet",
        "batch_size": 32,
        "epochs": 3,
        "dataset": "cifar10",
        "options": {"default_parallelism": 2},
        "ps_url": url,
    }
    result = client_app.send_task("trainscaler.submit", args=[request]).get(timeout=20)
    assert result["ok"] is True
    started = wait_for(server.succeeded, timeout=30, what="the task started on the server")
    assert [c.status for c in server.calls] == [503, 503, 200]
    (start,) = started
    assert start.path == "/ps/start"
    assert start.body["job"]["id"] == result["job"].split("/", 1)[1]
    assert start.body["job"]["state"]["parallelism"] >= 1
    time.sleep(0.5)  # nothing else arrives: the retried scale applied exactly once
    assert len(server.succeeded()) == 1


def test_celery_dead_letters_a_permanent_parameter_server_failure(
    procs, client_app, ps, dead_letters
) -> None:
    server, url = ps
    server.script = [404] * 20
    procs.worker("w-ps-dead")
    request = {
        "model_type": "resnet",
        "batch_size": 32,
        "epochs": 3,
        "dataset": "cifar10",
        "ps_url": url,
    }
    client_app.send_task("trainscaler.submit", args=[request]).get(timeout=20)
    letters = wait_for(dead_letters.list, timeout=30, what="a dead letter")
    assert letters[0].task == "trainscaler.scale"
    assert "permanent" in letters[0].error and "HTTP 404" in letters[0].error
    assert len(server.calls) == 1


def test_an_http_client_can_be_injected(redis_client: redis.Redis, ps) -> None:
    server, url = ps
    store = StateStore(redis_client, prefix=PREFIX)
    job = _record(store, "inj", url)
    with httpx.Client(timeout=2.0, headers={"X-Cluster": "c1"}) as http:
        ParameterServerScaler(store, http=http).scale(scale_request(job, 1, reason="r"))
    assert server.calls[0].headers["X-Cluster"] == "c1"
