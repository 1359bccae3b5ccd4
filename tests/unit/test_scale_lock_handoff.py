"""The scale lock a schedule decision takes for its scale (``ScaleCommand.lock``),
against a real redis-server: the scale applies under it without taking it again,
and past half the lock's TTL takes it as any other scale would.

Round trips are counted by the server itself (``total_reads_processed``).
"""

from __future__ import annotations

import pytest

from scheduler_core.models import EpochReport
from tests.unit.runtime_fixtures import FixedClock, round_trips, rt, server
from workers import handlers
from workers.intake import accept_report
from workers.scaling import ScaleCommand
from workers.wiring import Runtime

__all__ = ["rt", "server"]  # fixtures used by name

pytestmark = pytest.mark.timeout(60)


def _decided(rt: Runtime, job: str, *, replicas: int, epoch: int) -> ScaleCommand:
    accept_report(rt, EpochReport(job=job, replicas=replicas, epoch=epoch, epoch_time_s=10.0))
    sent: list[ScaleCommand] = []
    handlers.schedule_once(rt, send_scales=sent.extend)
    [command] = sent
    return command


def test_a_scale_that_comes_with_its_lock_takes_one_round_trip_less(rt: Runtime) -> None:
    # Scripts loaded and connections open for both ways: a scale that takes its lock.
    warm = _decided(rt, "default/warm", replicas=0, epoch=0)
    rt.redis.delete(rt.store.scale_lock_key("default/warm"))
    handlers.apply_scales(rt, [warm.model_copy(update={"lock": None, "locked_at": None})])

    handed = _decided(rt, "default/a", replicas=0, epoch=0)
    lock_key = rt.store.scale_lock_key("default/a")
    assert handed.lock is not None and rt.redis.get(lock_key) == handed.lock.encode()
    assert handed.locked_at == rt.clock.now()
    # The same kind of decision for another job, its lock left to the scale.
    taking = _decided(rt, "default/b", replicas=0, epoch=0)
    rt.redis.delete(rt.store.scale_lock_key("default/b"))
    taking = taking.model_copy(update={"lock": None, "locked_at": None, "record": None})

    with_lock = round_trips(rt, lambda: handlers.apply_scales(rt, [handed]))
    without = round_trips(rt, lambda: handlers.apply_scales(rt, [taking]))
    assert with_lock == without - 1  # no lock and no read of its own; the release alike
    assert rt.store.applied("default/a") is not None
    assert rt.store.applied("default/a").generation == handed.generation  # type: ignore[union-attr]
    assert not rt.redis.exists(lock_key)
    assert rt.store.pending_scales() == {}


def test_past_half_the_ttl_the_scale_takes_the_lock_its_token_still_holds(rt: Runtime) -> None:
    clock = rt.clock
    assert isinstance(clock, FixedClock)
    command = _decided(rt, "default/late", replicas=0, epoch=0)
    clock.value += rt.settings.scale_lock_ttl / 2
    [result] = handlers.apply_scales(rt, [command])
    assert result.error is None and result.outcome.startswith("scaled")
    assert not rt.redis.exists(rt.store.scale_lock_key("default/late"))


def test_a_lock_held_elsewhere_is_not_taken_for_the_scale(rt: Runtime) -> None:
    job = "default/busy"
    rt.redis.set(rt.store.scale_lock_key(job), "another-scale", px=30_000)
    command = _decided(rt, job, replicas=0, epoch=0)
    assert command.lock is None and command.locked_at is None
    assert rt.redis.get(rt.store.scale_lock_key(job)) == b"another-scale"
