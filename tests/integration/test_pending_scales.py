"""The pending-scale index on a real redis-server (``workers/adapters/pending_scales.py``).

A decision that changes a target waits in the index until a scale applies
its generation (or it is dead-lettered); ``lost_scales`` finds those that
waited too long and hands back the newest decision as the command to resend.
"""

from __future__ import annotations

import pytest
import redis

from scheduler_core.models import Reason, ScalingDecision
from tests.integration.conftest import settings_for
from workers.adapters.state_store import (
    AppliedTarget,
    DecisionRecord,
    ScheduleCursor,
    ScheduleWrite,
    StateStore,
)
from workers.scaling import lost_scales
from workers.wiring import Runtime

JOB = "default/a"
REASON = Reason(rule="test", message="by hand")


def _decide(store: StateStore, *, target: int, at: float) -> int:
    """The schedule's compare-and-set of one decision: its generation."""
    snapshot = store.read_schedule([(JOB, "throughput")])[0]
    generation = snapshot.generation + 1
    record = DecisionRecord(
        generation=generation,
        at=at,
        source="schedule",
        decision=ScalingDecision(job=JOB, current=1, target=target, reason=REASON),
    )
    write = ScheduleWrite(
        state="{}", cursor=ScheduleCursor(last_target=target), record=record, scales=True
    )
    assert store.write_schedule([(snapshot, write)]) == [True]
    return generation


def _apply(store: StateStore, generation: int, *, target: int) -> None:
    [begun] = store.begin_scales([(JOB, "t")], ttl=5.0)
    assert begun.locked
    applied = AppliedTarget(generation=generation, target=target, at=0.0, outcome="applied")
    store.finish_scales([(JOB, "t", applied)])


def test_a_decision_waits_until_its_generation_is_applied(
    store: StateStore, redis_client: redis.Redis
) -> None:
    first = _decide(store, target=2, at=10.0)
    assert store.pending_scales() == {JOB: 10.0}
    second = _decide(store, target=3, at=11.0)
    assert store.pending_scales() == {JOB: 11.0}
    # The older generation applied (a slow scale): the newer still waits.
    _apply(store, first, target=2)
    assert store.pending_scales() == {JOB: 11.0}
    _apply(store, second, target=3)
    assert store.pending_scales() == {}
    # A write that sends no scale (a keep) adds nothing.
    snapshot = store.read_schedule([(JOB, "throughput")])[0]
    keep = ScheduleWrite(state="{}", cursor=ScheduleCursor(last_target=3))
    assert store.write_schedule([(snapshot, keep)]) == [True]
    assert store.pending_scales() == {}


def test_a_resend_that_finds_the_generation_applied_settles_it(store: StateStore) -> None:
    generation = _decide(store, target=2, at=10.0)
    _apply(store, generation, target=2)
    store.mark_pending(pipe := store.redis.pipeline(), JOB, at=12.0)
    pipe.execute()
    # Nothing applied this time ("already applied"), and the job still leaves.
    [begun] = store.begin_scales([(JOB, "u")], ttl=5.0)
    store.finish_scales([(JOB, "u", None)])
    assert begun.locked and store.pending_scales() == {}


def test_settling_an_older_generation_keeps_the_newer_waiting(store: StateStore) -> None:
    first = _decide(store, target=2, at=10.0)
    second = _decide(store, target=3, at=11.0)
    store.settle_scale(JOB, generation=first)  # the older one dead-lettered
    assert store.pending_scales() == {JOB: 11.0}
    store.settle_scale(JOB, generation=second)
    assert store.pending_scales() == {}
    # A postponed retry of a settled job does not bring it back.
    store.postpone_scale(JOB, until=50.0)
    assert store.pending_scales() == {}


def test_an_autoscale_decision_waits_too(store: StateStore) -> None:
    decision = ScalingDecision(job=JOB, current=1, target=4, reason=REASON)
    generation = store.record_autoscale_decision(decision, at=20.0)
    assert store.pending_scales() == {JOB: 20.0}
    _apply(store, generation, target=4)
    assert store.pending_scales() == {}


@pytest.fixture
def runtime(runtime_env: dict[str, str]) -> Runtime:
    return Runtime(settings_for({**runtime_env, "TRAINSCALER_SCALE_RESEND_AFTER": "30"}))


def test_lost_scales_resends_the_newest_decision_once_it_waited_too_long(
    runtime: Runtime,
) -> None:
    store = runtime.store
    _decide(store, target=2, at=100.0)
    newest = _decide(store, target=3, at=110.0)
    assert lost_scales(runtime, now=139.0) == []  # 29 s: not yet
    [command] = lost_scales(runtime, now=141.0)
    assert (command.job, command.target, command.generation) == (JOB, 3, newest)
    assert command.source == "schedule" and command.attempt == 0
    # Under way from now: not resent again before another 30 s.
    assert store.pending_scales() == {JOB: 141.0}
    assert lost_scales(runtime, now=170.0) == []
    assert len(lost_scales(runtime, now=172.0)) == 1
    # Applied meanwhile: the next sweep sends nothing and the job leaves.
    _apply(store, newest, target=3)
    store.mark_pending(pipe := store.redis.pipeline(), JOB, at=0.0)
    pipe.execute()
    assert lost_scales(runtime, now=300.0) == []
    assert store.pending_scales() == {}


def test_a_new_target_takes_the_free_scale_lock_for_its_scale(
    store: StateStore, redis_client: redis.Redis
) -> None:
    def write(target: int, *, lock: str) -> int:
        snapshot = store.read_schedule([(JOB, "throughput")])[0]
        record = DecisionRecord(
            generation=snapshot.generation + 1,
            at=1.0,
            source="schedule",
            decision=ScalingDecision(job=JOB, current=1, target=target, reason=REASON),
        )
        pipe = redis_client.pipeline(transaction=False)
        store.queue_schedule_write(
            pipe,
            snapshot,
            ScheduleWrite(
                state="{}",
                cursor=ScheduleCursor(last_target=target),
                record=record,
                scales=True,
                scale_lock=lock,
                scale_lock_ttl_ms=5000,
            ),
        )
        return int(pipe.execute()[0])

    lock_key = store.scale_lock_key(JOB)
    assert write(2, lock="first") == 2  # taken for this decision's scale
    assert redis_client.get(lock_key) == b"first" and 0 < redis_client.pttl(lock_key) <= 5000
    assert write(3, lock="second") == 1  # held: this one's scale takes it itself
    assert redis_client.get(lock_key) == b"first"
    # The scale that came with the lock finds it its own, and releases it.
    [begun] = store.begin_scales([(JOB, "first")], ttl=5.0)
    assert begun.locked and begun.newest == 2
    store.finish_scales([(JOB, "first", None)])
    assert not redis_client.exists(lock_key)
