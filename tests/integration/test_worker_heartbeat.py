"""A real Celery worker's liveness heartbeat outlives a Redis outage; a frozen worker's does not.

The worker runs with ``TRAINSCALER_HEARTBEAT_FILE`` (what deploy/ sets), so its
main process rewrites the file (workers/heartbeat.py). The pod's probes are run
as the kubelet would: liveness ``trainscaler healthcheck --max-age S`` and
readiness ``celery inspect ping -d <node>``.

* Redis stopped: readiness fails, liveness keeps passing for many times the
  probe's max age (issue 16: a Redis blip must not restart every worker), and
  after Redis returns the worker answers the ping again.
* The worker's main process frozen (SIGSTOP): liveness fails within the max
  age, although Redis is up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CELERY, REPO, Procs, wait_for
from workers.adapters.redis_server import EmbeddedRedis

pytestmark = pytest.mark.timeout(180)

MAX_AGE = 6.0


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path / "redis") as server:
        yield server


@pytest.fixture
def redis_url(own_redis: EmbeddedRedis) -> str:
    return own_redis.url


def liveness(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from workers.cli import main; main()",
         "healthcheck", "--max-age", str(MAX_AGE)],
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO, check=False,
    )  # fmt: skip


def readiness(env: dict[str, str], node: str) -> bool:
    done = subprocess.run(
        [CELERY, "-A", "workers", "inspect", "ping", "-d", node, "--timeout", "3"],
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    return done.returncode == 0 and "pong" in done.stdout


def test_liveness_survives_a_redis_outage_and_readiness_does_not(
    procs: Procs, own_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    heartbeat = tmp_path / "heartbeat"
    extra = {"TRAINSCALER_HEARTBEAT_FILE": str(heartbeat), "TRAINSCALER_HEARTBEAT_INTERVAL": "0.5"}
    procs.worker("scale", queues="cluster-writes", pool="prefork", extra_env=extra)
    env = {**os.environ, **procs.env, **extra}
    node = f"scale@{os.uname().nodename}"
    assert liveness(env).returncode == 0
    assert wait_for(lambda: readiness(env, node), timeout=30, what="first pong")

    own_redis.stop()
    outage_ends = time.monotonic() + 3 * MAX_AGE
    checks = 0
    while time.monotonic() < outage_ends:
        alive = liveness(env)
        assert alive.returncode == 0, alive.stderr  # no restart because Redis is away
        checks += 1
        time.sleep(0.5)
    assert checks >= 3
    assert not readiness(env, node)

    own_redis.start()
    assert wait_for(lambda: readiness(env, node), timeout=60, interval=1, what="pong after Redis")
    assert liveness(env).returncode == 0


def test_a_frozen_worker_fails_liveness(procs: Procs, tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat"
    extra = {"TRAINSCALER_HEARTBEAT_FILE": str(heartbeat), "TRAINSCALER_HEARTBEAT_INTERVAL": "0.5"}
    worker = procs.worker("events", queues="events", pool="prefork", extra_env=extra)
    env = {**os.environ, **procs.env, **extra}
    assert liveness(env).returncode == 0
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        stale = wait_for(
            lambda: liveness(env).returncode == 1, timeout=60, interval=0.5, what="stale heartbeat"
        )
        assert stale
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    assert wait_for(lambda: liveness(env).returncode == 0, timeout=30, what="fresh again")
