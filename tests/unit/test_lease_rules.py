"""client-go's leader-election rules as pure functions (lease.py), and where the
planner's Lease lives (commands/planner.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.adapters.kubernetes.lease import (
    ElectionTiming,
    LeaseRecord,
    claim,
    held_by_another,
    micro_time,
)
from workers.commands.planner import lease_namespace, worker_argv
from workers.settings import Settings

T0, T1 = "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:05.000000Z"


def test_the_first_claim_creates_the_record() -> None:
    assert claim(None, identity="a", duration_s=15, now=T0) == LeaseRecord("a", 15, T0, T0, 0)


def test_renewing_keeps_acquire_time_and_transitions() -> None:
    held = LeaseRecord("a", 15, T0, T0, 3)
    assert claim(held, identity="a", duration_s=15, now=T1) == LeaseRecord("a", 15, T0, T1, 3)


@pytest.mark.parametrize("previous_holder", ["b", ""])
def test_a_takeover_is_a_transition(previous_holder: str) -> None:
    held = LeaseRecord(previous_holder, 15, T0, T0, 3)
    assert claim(held, identity="a", duration_s=15, now=T1) == LeaseRecord("a", 15, T1, T1, 4)


def test_another_holder_stands_for_the_duration_since_its_record_was_seen() -> None:
    record = LeaseRecord("b", 15, T0, T0, 0)
    assert held_by_another(record, identity="a", observed_at=100.0, now=114.9)
    assert not held_by_another(record, identity="a", observed_at=100.0, now=115.0)
    # Our own record, or a released one, never blocks us.
    assert not held_by_another(record, identity="b", observed_at=100.0, now=100.0)
    released = LeaseRecord("", 1, T0, T0, 0)
    assert not held_by_another(released, identity="a", observed_at=100.0, now=100.0)


def test_timing_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        ElectionTiming(lease_duration_s=5, renew_deadline_s=5.0, retry_period_s=1.0)


def test_micro_time_is_rfc3339_with_six_fraction_digits() -> None:
    assert micro_time(1.25) == "1970-01-01T00:00:01.250000Z"


def test_the_lease_lives_in_the_pods_namespace_unless_set(tmp_path: Path) -> None:
    pod_namespace = tmp_path / "namespace"
    pod_namespace.write_text("trainscaler\n")
    in_cluster = Settings(kube_in_cluster=True)
    assert lease_namespace(in_cluster, pod_namespace=pod_namespace) == "trainscaler"
    explicit = Settings(kube_in_cluster=True, planner_lease_namespace="ops")
    assert lease_namespace(explicit, pod_namespace=pod_namespace) == "ops"
    assert lease_namespace(Settings(), pod_namespace=pod_namespace) == "default"


def test_the_planner_worker_consumes_only_control_with_a_solo_pool() -> None:
    argv = worker_argv("p1", ["--loglevel", "info"])
    assert argv[:5] == ["worker", "--pool", "solo", "--queues", "control"]
    assert argv[-2:] == ["--loglevel", "info"]
    with pytest.raises(ValueError, match="always runs --pool solo --queues control"):
        worker_argv("p1", ["-Q", "events"])
