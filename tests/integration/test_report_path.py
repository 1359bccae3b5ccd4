"""A report's path through the real API, a real Celery worker and a real redis-server.

Round trips are counted by the server itself (``INFO stats``
``total_reads_processed``: one per command, pipeline or script call, from any
client); the test's own reads are left out by count.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.integration.api_fixtures import TOKEN, ServedApi, stack_env
from tests.integration.conftest import PREFIX, Procs, settings_for, wait_for
from workers.adapters.redis_queue import TRAIN, RedisSchedulerQueue
from workers.adapters.redis_server import EmbeddedRedis
from workers.api.app import create_app
from workers.intake import REPLY_TTL_S, SCHEDULE_FLAG, DecisionReply
from workers.wiring import Runtime

pytestmark = pytest.mark.timeout(180)

TRAIN_REQUEST = {"model_type": "resnet34", "batch_size": 64, "epochs": 5, "dataset": "cifar10"}


def _task(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "parameters": TRAIN_REQUEST,
        "state": {"parallelism": 2, "elapsed_time": 10.0},
    }


def _reads(client: redis.Redis) -> int:
    return int(client.info("stats")["total_reads_processed"])


@contextmanager
def _api(
    redis_url: str, *, stand_ins_url: str | None = None
) -> Iterator[tuple[httpx.Client, Runtime]]:
    env = stack_env(redis_url)
    if stand_ins_url is not None:
        env["TRAINSCALER_RECORDING_REDIS_URL"] = stand_ins_url
    settings = settings_for(env)
    runtime = Runtime(settings)
    with (
        ServedApi(create_app(settings, runtime=runtime)) as served,
        httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30.0
        ) as api,
    ):
        yield api, runtime
    runtime.redis.close()


def test_the_api_waits_on_a_reply_key_and_a_late_decision_is_not_lost(
    redis_url: str, redis_client: redis.Redis, procs: Procs
) -> None:
    with _api(redis_url) as (api, _):
        # Connections opened, scripts loaded (a wait that times out: no worker yet).
        assert api.post("/job", json=_task("warm"), params={"wait": 0.05}).status_code == 202
        redis_client.delete(f"{PREFIX}{SCHEDULE_FLAG}")  # this report claims the trigger anew
        before = _reads(redis_client)
        answer = api.post("/job", json=_task("late"), params={"wait": 1.0})
        trips = _reads(redis_client) - before - 1
    assert answer.status_code == 202 and answer.json()["decided"] is False
    # The push (one Lua call), the trigger (one Celery message) and one BLPOP: no
    # polling (the old route read the job's cursor 20 times a second while it waited).
    assert trips == 3
    # A worker that comes late still decides the report and answers its reply key,
    # which then expires by itself: nobody waits on it any more.
    procs.worker("late-worker", extra_env={"TRAINSCALER_FAULT_INJECTION": "false"})
    # Both reports waited (the warm-up's too): both answers are there.
    wait_for(
        lambda: len(redis_client.keys(f"{PREFIX}reply:*")) == 2,
        timeout=60,
        what="the late answers",
    )
    for key in redis_client.keys(f"{PREFIX}reply:*"):
        assert 0 < redis_client.pttl(key) <= REPLY_TTL_S * 1000
        raw = redis_client.lindex(key, 0)
        assert raw is not None
        reply = DecisionReply.model_validate_json(raw)
        assert reply.parallelism == 2 and reply.generation == 1  # first contact: as reported
    assert redis_client.llen(f"{PREFIX}job:default/late:decisions") == 1


def test_reports_through_the_api_cost_at_most_10_redis_round_trips_each(
    redis_url: str, redis_client: redis.Redis, procs: Procs
) -> None:
    reports = 40
    worker = procs.worker("burst-worker", extra_env={"TRAINSCALER_FAULT_INJECTION": "false"})
    queue = RedisSchedulerQueue(redis_client, prefix=PREFIX)
    with _api(redis_url) as (api, _), ThreadPoolExecutor(max_workers=reports) as pool:

        def burst(tag: str) -> tuple[list[httpx.Response], int]:
            """``reports`` reports at once while the worker is stopped, so they wait in
            the queue, as they do whenever reports come faster than one schedule run
            takes; the worker then decides them. Returns the answers and this test's
            own reads meanwhile."""
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                sent = [
                    pool.submit(api.post, "/job", json=_task(f"{tag}-{n}"), params={"wait": 10})
                    for n in range(reports)
                ]
                own = wait_for(
                    _counting(lambda: len(queue.items(TRAIN)) >= reports),
                    timeout=60,
                    what="every report queued",
                )
            finally:
                os.kill(worker.pid, signal.SIGCONT)
            answers = [s.result(timeout=60) for s in sent]
            # Answered once decided; then the scale task applies every target.
            own += wait_for(
                _counting(lambda: redis_client.llen(applied) >= len(answers) + applied_before),
                timeout=60,
                what="every target applied",
            )
            return answers, own

        # Warm: every connection a burst needs opened (each costs a few commands once:
        # AUTH, CLIENT SETINFO), scripts loaded, on both sides.
        applied, applied_before = f"{PREFIX}recording:applied", 0
        warm, _ = burst("warm")
        assert [w.status_code for w in warm] == [200] * reports
        applied_before = reports
        before = _reads(redis_client)
        bodies, own = burst("burst")
        trips = _reads(redis_client) - before - 1 - own
    assert [b.status_code for b in bodies] == [200] * reports, [b.text for b in bodies]
    assert all(b.json()["decided"] and b.json()["parallelism"] == 2 for b in bodies)
    # Everything: the API's push, trigger and BLPOP, the schedule run, the scale
    # task (with the recording scaler's own reads and writes, where Kubernetes would
    # be), both Celery hops (publish, deliver, ack) and the worker's idle polls.
    assert trips / reports <= 10, f"{trips} round trips for {reports} reports"


def test_a_report_that_goes_alone_costs_9_redis_round_trips(
    redis_url: str, redis_client: redis.Redis, procs: Procs, tmp_path: Path
) -> None:
    # The recording stand-ins for Kubernetes (scaler, cluster reader) keep their
    # records in a Redis of their own: in production those are Kubernetes requests,
    # so the runtime's Redis counts the product's round trips alone.
    with EmbeddedRedis(data_dir=tmp_path / "stand-ins") as stand_in_server:
        stand_ins = redis.Redis.from_url(stand_in_server.url)
        procs.worker(
            "lone-worker",
            extra_env={
                "TRAINSCALER_FAULT_INJECTION": "false",
                "TRAINSCALER_RECORDING_REDIS_URL": stand_in_server.url,
            },
        )
        applied = f"{PREFIX}recording:applied"
        trips = []
        with _api(redis_url, stand_ins_url=stand_in_server.url) as (api, _):
            for n in range(6):
                done = stand_ins.llen(applied)
                before = _reads(redis_client)
                answer = api.post("/job", json=_task(f"lone-{n}"), params={"wait": 10})
                assert answer.status_code == 200 and answer.json()["decided"], answer.text
                wait_for(
                    lambda: stand_ins.llen(applied) > done,  # noqa: B023
                    timeout=60,
                    what="the target applied",
                )
                trips.append(_reads(redis_client) - before - 1)
        assert not redis_client.exists(applied), "the scaler recorded into the runtime's Redis"
        stand_ins.close()
    # The first warms connections and scripts. Each report then goes alone, every
    # round trip its own (docs/runtime.md, "A report's path"): the API's push, trigger
    # and BLPOP (3); schedule's delivery (1), the pop with the trigger cleared, the
    # plan read and the hinted job's records and states read, the compare-and-set
    # with the ack, the answer and the job's scale lock taken for its scale, the
    # scale task sent (3); scale's delivery (1) and its release with what was
    # applied (1): it came with its lock. Neither Celery message is recorded for
    # redelivery (UNRECORDED_TASKS: what each carries is kept in Redis and swept).
    # Was 10 with the job's records read after the pop, 11 with the scale taking
    # its own lock, 12 with the ack a round trip of its own after the scale was
    # sent, 16 with both deliveries recorded (an unacked record and its removal
    # each), 22 before that (24 with the two stand-in calls: the job lookup and
    # the scaler): SCRIPT EXISTS before each pipeline of scripts, the trigger, the
    # plan, the records and the routes each read on their own. The fewest of five
    # leaves out the worker's idle polls (a BRPOP timing out, a restore sweep)
    # that may fall in a report's window.
    assert min(trips[1:]) <= 9, trips


def _counting(predicate: Any) -> Any:
    """``predicate`` for ``wait_for`` that returns, once true, how often it was called."""
    calls = 0

    def counted() -> int:
        nonlocal calls
        calls += 1
        return calls if predicate() else 0

    return counted
