"""A report's way in (``workers.intake``) and its answer, against a real redis-server.

Round trips are counted by the server itself (``total_reads_processed``: one
per command, pipeline or script call), nothing else talking to it.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core.models import EpochReport
from tests.unit.runtime_fixtures import FixedClock, round_trips, rt, server
from workers import handlers, job_decision
from workers.adapters.redis_queue import TRAIN, QueueFullError
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import JobRecord
from workers.intake import (
    REPLY_TTL_S,
    SCHEDULE_FLAG,
    DecisionReply,
    FinishReply,
    accept_report,
    is_reply_key,
    new_reply_key,
)
from workers.settings import Settings
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)


def _popped(rt: Runtime, key: str) -> bytes:
    raw = rt.redis.lpop(key)
    assert isinstance(raw, bytes), raw
    return raw


def _pending(rt: Runtime, job: str) -> list[dict[str, object]]:
    return [e.data for e in rt.queue.pending_entries(TRAIN, job)]


def test_a_report_goes_in_with_one_round_trip_and_claims_the_trigger_once(rt: Runtime) -> None:
    accept_report(rt, EpochReport(job="default/warm", replicas=1))  # loads the script once
    rt.redis.delete(rt.store.key(SCHEDULE_FLAG))
    triggered: list[int] = []

    def push(job: str, seconds: float) -> None:
        report = EpochReport(job=job, replicas=2, epoch_time_s=seconds)
        accept_report(
            rt, report, trigger=lambda _job: triggered.append(1), reply_to=new_reply_key(rt)
        )

    # Numbered, kept in the history, queued with its reply key, trigger claimed: one call.
    assert round_trips(rt, lambda: push("default/a", 10.0)) == 1
    assert round_trips(rt, lambda: push("default/b", 9.0)) == 1
    # Only the push that set the flag triggers: one schedule for both reports.
    assert triggered == [1]
    assert [r["epoch"] for r in _pending(rt, "default/a")] == [1]


def test_epochs_are_numbered_and_kept_as_the_runtime_always_did(rt: Runtime) -> None:
    job = "default/n"
    first = accept_report(rt, EpochReport(job=job, replicas=0))
    assert first.epoch is None  # a first contact is no epoch: not numbered, not kept
    assert rt.store.metrics(job) == []
    numbered = accept_report(rt, EpochReport(job=job, replicas=1, epoch_time_s=5.0))
    given = accept_report(rt, EpochReport(job=job, replicas=1, epoch=7, epoch_time_s=4.0))
    after = accept_report(rt, EpochReport(job=job, replicas=1, epoch_time_s=3.0))
    assert (numbered.epoch, given.epoch, after.epoch) == (1, 7, 8)
    assert [r.epoch for r in rt.store.metrics(job)] == [8, 7, 1]
    # The history holds exactly the numbered report's JSON, so an equal one is not kept twice.
    newest = rt.redis.lindex(rt.store.job_key(job, "metrics"), 0)
    assert newest == after.model_dump_json().encode()
    assert [r["epoch"] for r in _pending(rt, job)] == [None, 1, 7, 8]
    assert EpochReport.model_validate(_pending(rt, job)[-1]) == after


def test_a_full_queue_takes_nothing_in_and_still_triggers(server: EmbeddedRedis) -> None:
    settings = Settings(redis_url=server.url, scaler="recording", queue_max_length=1)
    rt = Runtime(settings, clock=FixedClock())
    rt.redis.flushall()
    try:
        accept_report(rt, EpochReport(job="default/a", replicas=1, epoch_time_s=2.0))
        triggered: list[int] = []
        with pytest.raises(QueueFullError):
            accept_report(
                rt,
                EpochReport(job="default/b", replicas=1, epoch_time_s=2.0),
                trigger=lambda _job: triggered.append(1),
            )
        assert triggered == [1]  # a full queue wants draining
        assert rt.store.metrics("default/b") == []
        assert rt.redis.get(rt.store.job_key("default/b", "epochs")) is None
        assert rt.queue.items(TRAIN) == ["default/a"]
    finally:
        rt.redis.close()


def test_the_decision_is_answered_on_each_senders_reply_key(rt: Runtime) -> None:
    job = "default/r"
    rt.store.save_job(JobRecord(job=job, job_id="r", policy=rt.settings.job_policy))
    keys = [new_reply_key(rt), new_reply_key(rt)]
    # Two reports of one job, merged into one queue item: both senders get the decision.
    accept_report(rt, EpochReport(job=job, replicas=0, epoch=0), reply_to=keys[0])
    accept_report(rt, EpochReport(job=job, replicas=1, epoch=1, epoch_time_s=9.0), reply_to=keys[1])
    sent: list[handlers.ScaleCommand] = []
    handlers.schedule_once(rt, send_scales=sent.extend)
    (newest,) = rt.store.decisions(job, limit=1)
    answers = []
    for key in keys:
        assert 0 < rt.redis.pttl(key) <= REPLY_TTL_S * 1000  # expires if nobody takes it
        answers.append(DecisionReply.model_validate_json(_popped(rt, key)))
    expected = DecisionReply(
        parallelism=newest.decision.target,
        generation=newest.generation,
        reason=newest.decision.reason,
    )
    assert answers == [expected, expected]
    assert [c.target for c in sent] == [newest.decision.target]


def test_a_report_the_cluster_policy_owns_is_answered_without_a_decision(rt: Runtime) -> None:
    job = "default/c"
    rt.store.save_job(JobRecord(job=job, job_id="c", policy=rt.settings.cluster_policy))
    key = new_reply_key(rt)
    accept_report(rt, EpochReport(job=job, replicas=2, epoch=0), reply_to=key)
    handlers.schedule_once(rt, send_scales=lambda _: None)
    assert DecisionReply.model_validate_json(_popped(rt, key)) == DecisionReply()
    assert rt.store.inbox_length(rt.settings.cluster_policy) == 1  # handed to the planner


def test_finish_answers_its_reply_key(rt: Runtime) -> None:
    job = "default/f"
    rt.store.save_job(JobRecord(job=job, job_id="f", policy=rt.settings.job_policy))
    key = new_reply_key(rt)
    handlers.finish_job(rt, job, reply_to=key)
    record = rt.store.get_job(job)
    assert record is not None
    assert FinishReply.model_validate_json(_popped(rt, key)).finished_at == record.finished_at


def test_answers_go_to_reply_keys_only(rt: Runtime) -> None:
    assert is_reply_key(rt, new_reply_key(rt))
    for other in ("events", rt.store.key("jobs"), rt.store.key("reply:") + "x" * 31 + ":"):
        assert not is_reply_key(rt, other)


def test_a_decision_that_lost_its_compare_and_set_is_neither_acked_nor_answered_until_redone(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = "default/conflict"
    key = new_reply_key(rt)
    accept_report(rt, EpochReport(job=job, replicas=0, epoch=0), reply_to=key)
    compute = job_decision.compute
    touched: list[int] = []

    def compute_then_touch(*args: Any, **kwargs: Any) -> Any:
        outcome = compute(*args, **kwargs)
        if not touched:  # another writer, as an autoscale decision: a new generation
            touched.append(int(rt.redis.incr(rt.store.job_key(job, "generation"))))
        return outcome

    monkeypatch.setattr(job_decision, "compute", compute_then_touch)
    sent: list[handlers.ScaleCommand] = []
    handlers.schedule_once(rt, send_scales=sent.extend)
    # Decided again on its own, over the generation the other writer took: one
    # answer (the stale decision's did not go with the ack that did not go), one scale.
    (newest,) = rt.store.decisions(job, limit=1)
    assert touched == [1] and newest.generation == 2
    assert rt.redis.llen(key) == 1
    assert DecisionReply.model_validate_json(_popped(rt, key)).generation == 2
    assert [c.generation for c in sent] == [2]
    assert rt.queue.items(TRAIN) == [] and rt.queue.stats(now=0.0)[TRAIN].in_flight == 0


def test_a_run_hinted_with_the_pushed_job_reads_it_in_its_first_round_trip(rt: Runtime) -> None:
    def run(job: str, *, hint: tuple[str, ...]) -> tuple[int, list[handlers.ScaleCommand]]:
        accept_report(rt, EpochReport(job=job, replicas=0, epoch=0))
        sent: list[handlers.ScaleCommand] = []
        trips = round_trips(
            rt, lambda: handlers.schedule_once(rt, send_scales=sent.extend, hint=hint)
        )
        return trips, sent

    run("default/warm", hint=())  # scripts loaded
    run("default/warm-hinted", hint=("default/warm-hinted",))
    unhinted, plain = run("default/a", hint=())
    hinted, read_ahead = run("default/b", hint=("default/b",))
    # A hint the queue does not return: the popped job is read with its chunk.
    wrong, elsewhere = run("default/c", hint=("default/nobody",))
    assert hinted == unhinted - 1 and wrong == unhinted
    # Decided alike whichever way its state was read.
    assert [(c.target, c.generation) for c in read_ahead] == [(1, 1)]
    assert [(c.target, c.generation) for c in plain] == [(1, 1)]
    assert [(c.target, c.generation) for c in elsewhere] == [(1, 1)]
    assert rt.queue.items(TRAIN) == []
