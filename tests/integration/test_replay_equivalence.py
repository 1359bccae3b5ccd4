"""Replay equivalence: the runtime decides what the simulator decides.

One recorded report stream (``tests/data/replay-workload1-30jobs-40rounds.jsonl.gz``:
the simulator running ``goodput`` on the first 30 jobs of workload 1, first
40 rounds; ``python -m sim.trace.replay record ...``) is played two ways:

* through the simulator's policy loop (``sim.trace.replay.replay``);
* through the real runtime: a real redis-server, a real Celery worker and a
  real beat, the HTTP API (uvicorn) receiving every report as ``POST /job``,
  ``schedule`` handing them to goodput's inbox, and one ``autoscale`` round
  triggered per recorded round. Time is the shared Redis clock
  (``TRAINSCALER_CLOCK=redis``): set to each report's time when it is sent
  and to the round's time when the round runs, so rounds line up. The
  cluster each round sees is the recorded one (the static cluster reader
  with the recorded snapshot).

Pass: the sequence of targets per job is identical, and equal to the recording's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from celery import Celery

from scheduler_core.models import EpochReport
from scheduler_core.policies.base import in_round_order
from sim.trace.replay import RecordedRound, Recording, replay, targets_by_job
from tests.integration.api_fixtures import ServedApi
from tests.integration.conftest import BASE_ENV, PREFIX, Procs, settings_for, wait_for
from workers.adapters.state_store import StateStore
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader
from workers.api.app import create_app
from workers.celery_app import create_app as create_celery_app
from workers.wiring import RedisClock, Runtime

pytestmark = pytest.mark.timeout(240)

RECORDING = (
    Path(__file__).resolve().parents[1] / "data" / "replay-workload1-30jobs-40rounds.jsonl.gz"
)


@pytest.fixture
def replay_env(redis_url: str, redis_client: redis.Redis) -> dict[str, str]:
    return {
        **BASE_ENV,
        "TRAINSCALER_REDIS_URL": redis_url,
        "TRAINSCALER_FAULT_INJECTION": "false",
        "TRAINSCALER_CLUSTER_POLICY": "goodput",
        "TRAINSCALER_MAX_LOAD_DESIRED": "1.0",
        "TRAINSCALER_CLOCK": "redis",
        # Rounds are triggered by the test, one per recorded round; beat runs
        # (leases, metrics) but never fires a round of its own.
        "TRAINSCALER_AUTOSCALE_INTERVAL": "1000000",
        "TRAINSCALER_API_AUTH_DISABLED": "true",
    }


@pytest.fixture
def served(replay_env: dict[str, str]) -> Iterator[tuple[ServedApi, Celery, Runtime]]:
    settings = settings_for(replay_env)
    runtime = Runtime(settings)
    app = create_celery_app(settings)
    with ServedApi(create_app(settings, runtime=runtime)) as api:
        yield api, app, runtime
    app.close()


def _task(report: EpochReport) -> dict[str, object]:
    """The report as a job sends it: KubeML's TrainTask with trainscaler's epoch facts."""
    namespace, name = report.job.split("/", 1)
    state: dict[str, object] = {"parallelism": max(1, report.replicas)}
    optional = {
        "elapsed_time": report.epoch_time_s,
        "epoch": report.epoch,
        "total_epochs": report.total_epochs,
        "iterations": report.iterations,
        "nodes": report.nodes,
    }
    state.update({k: v for k, v in optional.items() if v is not None})
    return {
        "job_id": name,
        "parameters": {
            "model_type": name.rsplit("-", 1)[0],
            "batch_size": 1,
            "epochs": report.total_epochs or 1,
            "dataset": "replay",
            "namespace": namespace,
        },
        "state": state,
    }


def _play_round(
    recorded: RecordedRound,
    *,
    http: httpx.Client,
    celery_app: Celery,
    clock: RedisClock,
    cluster: StaticClusterReader,
    store: StateStore,
) -> dict[str, int]:
    cluster.store(StaticCluster(jobs=recorded.jobs, snapshot=recorded.cluster))
    reports = in_round_order(recorded.reports)
    for report in reports:
        clock.set(report.at)  # the API stamps the report with the clock's time
        answer = http.post("/job", params={"wait": 0}, json=_task(report))
        assert answer.status_code in (200, 202), answer.text
    wait_for(
        lambda: store.inbox_length("goodput") == len(reports),
        timeout=60,
        what=f"{len(reports)} reports handed to goodput at {recorded.now}",
    )
    clock.set(recorded.now)
    result = celery_app.send_task("trainscaler.autoscale").get(timeout=60)
    assert result["ran"] is True, result
    plan = store.latest_plan()
    assert plan is not None and plan.run_id == result["run_id"]
    assert store.inbox_length("goodput") == 0
    return plan.plan.targets()


def test_runtime_and_simulator_give_identical_targets(
    procs: Procs,
    served: tuple[ServedApi, Celery, Runtime],
    replay_env: dict[str, str],
    redis_client: redis.Redis,
) -> None:
    recording = Recording.read(RECORDING)
    assert recording.header.policy == "goodput"
    assert recording.header.params == {"max_load_desired": 1.0}
    simulated = replay(recording.rounds, policy="goodput", params=recording.header.params)
    recorded = [r.targets for r in recording.rounds]
    assert simulated == recorded

    api, celery_app, _ = served
    clock = RedisClock(redis_client, prefix=PREFIX)
    clock.set(0.0)
    procs.worker("w1", extra_env=replay_env)
    procs.beat("beat", extra_env=replay_env)
    store = StateStore(redis_client, prefix=PREFIX)
    cluster = StaticClusterReader(redis_client, prefix=PREFIX)
    played = []
    with httpx.Client(base_url=api.url, timeout=30.0) as http:
        for recorded_round in recording.rounds:
            played.append(
                _play_round(
                    recorded_round,
                    http=http,
                    celery_app=celery_app,
                    clock=clock,
                    cluster=cluster,
                    store=store,
                )
            )
    assert targets_by_job(played) == targets_by_job(simulated)
    assert played == recorded
    # Every round was one the test triggered.
    assert len(store.runs()) == len(recording.rounds)
