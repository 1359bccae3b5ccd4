"""KubeML's own call sequence against trainscaler, end to end.

Real ``redis-server``, a real Celery worker process and the KubeML listener
over real HTTP. The KubeML side is played as KubeML's Go code behaves
(repository DiegoStock12/kubeml):

* the controller POSTs a ``TrainRequest`` to the scheduler's ``/train`` and
  takes the whole answer body as the task id (``scheduler/client/client.go``);
* the parameter server takes the ``TrainTask`` on ``/start`` and a
  ``JobState`` on ``/update/{id}`` (``ps/api.go``), decoding as Go's
  ``json.Unmarshal`` does: unknown keys ignored, missing keys zero. This fake
  fails the test on a zero id or a zero parallelism (a Go zero means the
  scheduler sent nothing there);
* the train job runs N epochs; after each but the last it POSTs its
  ``TrainTask`` to the scheduler's ``/job`` and blocks until its ``/update``
  arrives (``train/job.go``), here with a timeout;
* when done it tells the parameter server (``/finish/{id}``), which sends
  ``DELETE /finish/{id}`` to the scheduler.

The expected parallelism of every epoch is computed here from KubeML's rule
(``scheduler/policy.go``: <= 1.05 x the reference adds one, >= 1.2 x removes
one, otherwise keep), with trainscaler's documented bound [1, max].
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
import redis

from tests.integration.api_fixtures import ServedApi
from tests.integration.conftest import BASE_ENV, Procs, settings_for, wait_for
from tests.integration.http_stub import serving
from workers.api.kubeml_compat import create_kubeml_app
from workers.wiring import Runtime

pytestmark = pytest.mark.timeout(240)

DEFAULT_PARALLELISM = 2
MAX_PARALLELISM = 4
# Seconds each epoch "took", by epoch: up, up, up (clamped at the max), keep, down, up.
EPOCH_TIMES = [100.0, 90.0, 93.0, 100.0, 120.0, 118.0, 80.0]
UPDATE_TIMEOUT_S = 45.0


def kubeml_expected_parallelism(times: list[float], *, default: int, upper: int) -> list[int]:
    """The parallelism of each epoch under KubeML's throughput rule (written out here,
    independently of trainscaler's policy), bounded to [1, upper]."""
    parallelism, reference = default, None
    sequence = []
    for epoch, elapsed in enumerate(times, start=1):
        sequence.append(parallelism)
        if epoch == len(times):
            break  # KubeML's job asks for no update after its last epoch
        if reference is None or elapsed <= 1.05 * reference:
            parallelism, reference = parallelism + 1, elapsed
        elif elapsed >= 1.2 * reference:
            parallelism, reference = parallelism - 1, elapsed
        parallelism = max(1, min(upper, parallelism))
    return sequence


def test_the_oracle_follows_kubemls_rule() -> None:
    # Hand-checked: 100 -> +1 (first time), 90 <= 105 -> +1, 93 <= 94.5 -> +1 (clamped
    # at 4), 100 within (97.65, 111.6) -> keep, 120 >= 111.6 -> -1, 118 <= 126 -> +1.
    assert kubeml_expected_parallelism(EPOCH_TIMES, default=2, upper=4) == [2, 3, 4, 4, 4, 3, 4]


# --- Go's json.Unmarshal, as the fake parameter server needs it ------------------------


def go_struct(raw: Any, fields: dict[str, type], where: str) -> dict[str, Any]:
    """Decode an object into a flat Go struct: known keys (case-insensitive) typed,
    unknown keys ignored, missing or null keys zero."""
    zero = {str: "", int: 0, float: 0.0, bool: False, dict: {}}
    value = {name: zero[kind] for name, kind in fields.items()}
    if raw is None:
        return value
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: not an object")
    for key, item in raw.items():
        name = next((f for f in fields if f.lower() == key.lower()), None)
        if name is None or item is None:
            continue
        kind = fields[name]
        if kind is int and (isinstance(item, bool) or not isinstance(item, int)):
            raise ValueError(f"{where}.{name}: not an int")
        if kind is float and (isinstance(item, bool) or not isinstance(item, int | float)):
            raise ValueError(f"{where}.{name}: not a number")
        if kind in (str, bool, dict) and not isinstance(item, kind):
            raise ValueError(f"{where}.{name}: wrong type")
        value[name] = float(item) if kind is float else item
    return value


def decode_job_state(raw: Any) -> dict[str, Any]:
    return go_struct(raw, {"parallelism": int, "elapsed_time": float}, "JobState")


def decode_train_task(raw: Any) -> dict[str, Any]:
    task = go_struct(raw, {"request": dict, "job": dict}, "TrainTask")
    request = go_struct(
        task["request"],
        {
            "model_type": str,
            "batch_size": int,
            "epochs": int,
            "dataset": str,
            "lr": float,
            "function_name": str,
            "options": dict,
        },
        "TrainRequest",
    )
    request["options"] = go_struct(
        request["options"],
        {
            "default_parallelism": int,
            "static_parallelism": bool,
            "validate_every": int,
            "k": int,
            "goal_accuracy": float,
        },
        "TrainOptions",
    )
    job = go_struct(task["job"], {"id": str, "state": dict}, "JobInfo")
    job["state"] = decode_job_state(job["state"])
    return {"request": request, "job": job}


# --- KubeML's parameter server and train job ----------------------------------------


@dataclass
class KubemlSide:
    """The fake parameter server's view: every call, every failure, the jobs' channels."""

    scheduler_url: str = ""
    failures: list[str] = field(default_factory=list)
    starts: list[dict[str, Any]] = field(default_factory=list)
    updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    channels: dict[str, queue.Queue[dict[str, Any]]] = field(default_factory=dict)
    jobs: dict[str, TrainJob] = field(default_factory=dict)
    # /update calls to answer 503 before taking one (the scheduler must retry them).
    unavailable_updates: int = 0
    refused_updates: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)


@dataclass
class TrainJob:
    """KubeML's train job (train/job.go), with a timeout on each wait."""

    side: KubemlSide
    task: dict[str, Any]
    ps_url: str
    epochs_run: list[tuple[int, int]] = field(default_factory=list)  # (epoch, parallelism)
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        job_id = self.task["job"]["id"]
        parallelism = self.task["job"]["state"]["parallelism"]
        epochs = self.task["request"]["epochs"]
        try:
            with httpx.Client(timeout=15.0) as http:
                for epoch in range(1, epochs + 1):
                    self.epochs_run.append((epoch, parallelism))
                    self.task["job"]["state"]["elapsed_time"] = EPOCH_TIMES[epoch - 1]
                    if epoch == epochs:
                        break
                    # What Go's json.Marshal writes for the job's TrainTask; "pod" is a
                    # field the scheduler does not model (a zero corev1.Pod).
                    body = {
                        **self.task,
                        "job": {
                            **self.task["job"],
                            "pod": {"metadata": {"creationTimestamp": None}, "spec": {}},
                        },
                    }
                    answer = http.post(f"{self.side.scheduler_url}/job", json=body)
                    if answer.status_code != 200 or answer.content != b"":
                        raise AssertionError(f"/job answered {answer.status_code} {answer.text!r}")
                    try:
                        update = self.side.channels[job_id].get(timeout=UPDATE_TIMEOUT_S)
                    except queue.Empty:
                        raise AssertionError(
                            f"epoch {epoch}: no /update within {UPDATE_TIMEOUT_S}s"
                        ) from None
                    self.task["job"]["state"] = update
                    parallelism = update["parallelism"]
                finished = http.post(f"{self.ps_url}/finish/{job_id}")
                if finished.status_code != 200:
                    raise AssertionError(f"/finish answered {finished.status_code}")
        except Exception as error:  # reported to the test through self.error
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self.done.set()


def _handler(side: KubemlSide, ps_url: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = json.loads(self.rfile.read(length) or b"null")
            path = self.path
            if path == "/start":
                self._start(raw)
            elif path.startswith("/update/"):
                self._update(path.removeprefix("/update/"), raw)
            elif path.startswith("/finish/"):
                self._finish(path.removeprefix("/finish/"))
            else:
                side.fail(f"unexpected POST {path}")
                self._answer(404)

        def _start(self, raw: Any) -> None:
            task = decode_train_task(raw)
            if not task["job"]["id"] or task["job"]["state"]["parallelism"] == 0:
                side.fail(f"/start with a zero id or parallelism: {raw!r}")
                self._answer(400)
                return
            job_id = task["job"]["id"]
            with side.lock:
                side.starts.append(copy.deepcopy(task))
                side.channels[job_id] = queue.Queue()
                job = side.jobs[job_id] = TrainJob(side=side, task=task, ps_url=ps_url[0])
            threading.Thread(target=job.run, daemon=True).start()
            self._answer(200)

        def _update(self, job_id: str, raw: Any) -> None:
            state = decode_job_state(raw)
            if not job_id or state["parallelism"] == 0:
                side.fail(f"/update/{job_id} with a zero id or parallelism: {raw!r}")
                self._answer(400)
                return
            channel = side.channels.get(job_id)
            if channel is None:  # KubeML's PS: "Received response for non-existing job"
                side.fail(f"/update for unknown job {job_id}")
                self._answer(400)
                return
            with side.lock:
                if side.unavailable_updates > 0:
                    side.unavailable_updates -= 1
                    side.refused_updates.append(state)
                    self._answer(503)
                    return
                side.updates.append((job_id, state))
            channel.put(dict(state))
            self._answer(200)

        def _finish(self, job_id: str) -> None:
            # KubeML's PS jobFinish: tell the scheduler, forget the job.
            with httpx.Client(timeout=15.0) as http:
                answer = http.delete(f"{side.scheduler_url}/finish/{job_id}")
            if answer.status_code != 200:
                side.fail(f"scheduler /finish answered {answer.status_code}")
            with side.lock:
                side.channels.pop(job_id, None)
            self._answer(200)

        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture
def kubeml_ps() -> Iterator[tuple[KubemlSide, str]]:
    side = KubemlSide()
    url: list[str] = []
    with serving(_handler(side, url)) as base:
        url.append(base)
        yield side, base


def test_kubeml_controller_ps_and_job_run_unchanged_against_trainscaler(
    redis_url: str, redis_client: redis.Redis, procs: Procs, kubeml_ps: tuple[KubemlSide, str]
) -> None:
    side, ps_url = kubeml_ps
    side.unavailable_updates = 2  # a parameter server briefly away: retried, answered once
    env = {
        **BASE_ENV,
        "TRAINSCALER_REDIS_URL": redis_url,
        "TRAINSCALER_FAULT_INJECTION": "false",
        "TRAINSCALER_AUTOSCALE_INTERVAL": "3600",
    }
    procs.env = env
    procs.worker("w-kubeml")
    settings = settings_for(
        {
            **env,
            "TRAINSCALER_KUBEML_API_ENABLED": "true",
            "TRAINSCALER_PS_URL": ps_url,
            "TRAINSCALER_KUBEML_MAX_PARALLELISM": str(MAX_PARALLELISM),
        }
    )
    runtime = Runtime(settings)
    with ServedApi(create_kubeml_app(settings, runtime=runtime)) as scheduler:
        side.scheduler_url = scheduler.url
        # The controller: KubeML's TrainRequest as Go's json.Marshal writes it.
        train_request = {
            "model_type": "resnet34",
            "batch_size": 128,
            "epochs": len(EPOCH_TIMES),
            "dataset": "cifar10",
            "lr": 0.01,
            "function_name": "resnet",
            "options": {
                "default_parallelism": DEFAULT_PARALLELISM,
                "static_parallelism": False,
                "validate_every": 0,
                "k": -1,
                "goal_accuracy": 100,
            },
        }
        with httpx.Client(timeout=15.0) as http:
            answer = http.post(f"{scheduler.url}/train", json=train_request)
        assert answer.status_code == 200
        job_id = answer.text  # sendTask: the whole body is the id
        assert job_id and json.dumps(job_id) == f'"{job_id}"' and "{" not in job_id

        job = wait_for(
            lambda: side.jobs.get(job_id), timeout=60, what="the parameter server's /start"
        )
        if job is None:  # wait_for returns only once it has one
            pytest.fail("no train job started")
        assert job.done.wait(timeout=len(EPOCH_TIMES) * UPDATE_TIMEOUT_S), "train job hung"
        assert job.error is None, job.error
        assert side.failures == []

        expected = kubeml_expected_parallelism(
            EPOCH_TIMES, default=DEFAULT_PARALLELISM, upper=MAX_PARALLELISM
        )
        # Every epoch ran, each with the parallelism KubeML's rule gives.
        assert job.epochs_run == list(enumerate(expected, start=1))
        (start,) = side.starts
        assert start["job"]["state"]["parallelism"] == DEFAULT_PARALLELISM
        assert start["request"]["model_type"] == "resnet34"
        assert start["request"]["batch_size"] == 128
        assert start["request"]["lr"] == pytest.approx(0.01)
        # One JobState per report, keep and clamped epochs included, echoing each epoch's time.
        assert side.updates == [
            (job_id, {"parallelism": p, "elapsed_time": t})
            for p, t in zip(expected[1:], EPOCH_TIMES[:-1], strict=True)
        ]
        # The two 503s were the first epoch's answer, sent again until it was taken.
        assert side.refused_updates == [side.updates[0][1]] * 2

        # /finish forgot the job: finished, no policy state, no queued work, no PS parallelism.
        key = f"{settings.kubeml_namespace}/{job_id}"
        record = runtime.store.get_job(key)
        assert record is not None and record.finished_at is not None
        assert not redis_client.exists(runtime.store.job_key(key, "policy:throughput"))
        assert redis_client.hget(runtime.store.key("ps:replicas"), key) is None
        assert runtime.queue.depths() == {"train": 0, "wait": 0}
        # A late report of the finished job is refused and changes nothing.
        late = {**job.task, "job": {**job.task["job"], "id": job_id}}
        with httpx.Client(timeout=15.0) as http:
            refused = http.post(f"{scheduler.url}/job", json=late)
            again = http.delete(f"{scheduler.url}/finish/{job_id}")
        assert refused.status_code == 500
        assert again.status_code == 200 and again.content == b""
        assert len(side.updates) == len(EPOCH_TIMES) - 1
