"""The planner's leader election: the Lease rules over real HTTP, then real processes.

First ``LeaderElector`` against the loopback API server with an injected
clock (acquire, renew, expiry measured from when the record was seen to
change, takeover with a transition, optimistic concurrency, release).
Then two ``trainscaler planner`` processes with real Redis, beat and the
loopback server: exactly one leads and runs the autoscale rounds; after
``kill -9`` of the leader the standby takes over within the lease duration
(plus one retry period) and the rounds continue under the new leader.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.conftest import PREFIX, REPO, Procs, wait_for
from tests.integration.metrics_scrape import metrics_env, sample, scrape, scrape_until
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes import install_crd
from workers.adapters.kubernetes.client import KubeApiError, KubeClient
from workers.adapters.kubernetes.lease import (
    LEASES,
    ElectionTiming,
    LeaderElector,
    LeaseRecord,
)
from workers.adapters.redis_server import free_port
from workers.adapters.state_store import StateStore
from workers.commands.planner import LOST_LEASE_EXIT

pytestmark = pytest.mark.timeout(180)

NS = "default"
LEASE = "planner-test"
TIMING = ElectionTiming(lease_duration_s=15, renew_deadline_s=10.0, retry_period_s=2.0)


class SteppedClock:
    def __init__(self, now: float) -> None:
        self.now_s = now

    def now(self) -> float:
        return self.now_s


@pytest.fixture
def loopback() -> Iterator[LoopbackApiServer]:
    server = LoopbackApiServer(host="127.0.0.1", port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _elector(
    server: LoopbackApiServer,
    identity: str,
    clock: SteppedClock,
    *,
    timing: ElectionTiming = TIMING,
) -> LeaderElector:
    return LeaderElector(
        client=KubeClient(server.api_client()),
        namespace=NS,
        name=LEASE,
        identity=identity,
        clock=clock,
        wall_clock=clock,
        timing=timing,
    )


def _record(server: LoopbackApiServer) -> LeaseRecord:
    lease = KubeClient(server.api_client()).request("GET", LEASES.object_path(NS, LEASE))
    return LeaseRecord.from_lease(lease)


def test_acquire_renew_expire_and_take_over(loopback: LoopbackApiServer) -> None:
    clock = SteppedClock(1_000_000.0)
    a, b = _elector(loopback, "a", clock), _elector(loopback, "b", clock)
    assert a.try_acquire_or_renew()
    first = _record(loopback)
    assert (first.holder, first.duration_s, first.transitions) == ("a", 15, 0)
    assert first.acquire_time == first.renew_time == "1970-01-12T13:46:40.000000Z"
    assert not b.try_acquire_or_renew()  # held, and b has just seen it

    # a renews: acquireTime and transitions stay, renewTime moves.
    clock.now_s += 10
    assert a.try_acquire_or_renew()
    renewed = _record(loopback)
    assert renewed.acquire_time == first.acquire_time and renewed.transitions == 0
    assert renewed.renew_time == "1970-01-12T13:46:50.000000Z"

    # b measures expiry from when it saw the record change (its own clock), not from
    # a's timestamps: 14 s after seeing the renewal it still waits; at 15 s it takes over.
    assert not b.try_acquire_or_renew()  # sees the renewal now
    clock.now_s += 14
    assert not b.try_acquire_or_renew()
    clock.now_s += 1
    assert b.try_acquire_or_renew()
    taken = _record(loopback)
    assert (taken.holder, taken.transitions) == ("b", 1)
    assert taken.acquire_time == taken.renew_time != first.acquire_time

    # a finds another holder: its renew loop reports the lease lost at once.
    stop = threading.Event()
    result: list[bool] = []
    fast = _elector(
        loopback,
        "a",
        clock,
        timing=ElectionTiming(lease_duration_s=3, renew_deadline_s=0.2, retry_period_s=0.05),
    )
    thread = threading.Thread(target=lambda: result.append(fast.renew_until_lost(stop)))
    thread.start()
    thread.join(timeout=10)
    stop.set()
    assert result == [False]


def test_a_race_for_the_lease_has_one_winner(loopback: LoopbackApiServer) -> None:
    clock = SteppedClock(2_000_000.0)
    a, b = _elector(loopback, "a", clock), _elector(loopback, "b", clock)
    assert a.try_acquire_or_renew()
    a.release()
    # Both read the released lease; only the first write with that resourceVersion wins.
    client = KubeClient(loopback.api_client())
    read = client.request("GET", LEASES.object_path(NS, LEASE))
    assert b.try_acquire_or_renew()
    stale = {**read, "spec": {**read["spec"], "holderIdentity": "c"}}
    with pytest.raises(KubeApiError) as conflict:
        client.request("PUT", LEASES.object_path(NS, LEASE), body=stale)
    assert conflict.value.status == 409
    assert _record(loopback).holder == "b"


def test_release_hands_over_without_waiting_for_expiry(loopback: LoopbackApiServer) -> None:
    clock = SteppedClock(3_000_000.0)
    a, b = _elector(loopback, "a", clock), _elector(loopback, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    released = _record(loopback)
    assert (released.holder, released.duration_s) == ("", 1)
    assert b.try_acquire_or_renew()  # same instant: no expiry needed
    assert _record(loopback).transitions == 1


def test_renewal_past_the_deadline_loses_the_lease(loopback: LoopbackApiServer) -> None:
    clock = SteppedClock(4_000_000.0)
    timing = ElectionTiming(lease_duration_s=3, renew_deadline_s=0.5, retry_period_s=0.05)
    elector = _elector(loopback, "a", clock, timing=timing)
    assert elector.try_acquire_or_renew()
    loopback.inject_faults(verb=None, rate=1.0, codes=(503,), seed=0, resource="leases")
    clock.now_s += 1.0  # past the renew deadline since the last good renewal
    try:
        assert elector.renew_until_lost(threading.Event()) is False
    finally:
        loopback.inject_faults(verb=None, rate=0.0, codes=(503,), seed=0)


# --- two planner processes ------------------------------------------------------------

PLANNER_ENV = {
    "TRAINSCALER_SCALER": "kubernetes",
    "TRAINSCALER_PLANNER_LEASE_NAME": LEASE,
    "TRAINSCALER_PLANNER_LEASE_NAMESPACE": NS,
    "TRAINSCALER_PLANNER_LEASE_DURATION_SECONDS": "4",
    "TRAINSCALER_PLANNER_RENEW_DEADLINE_SECONDS": "3",
    "TRAINSCALER_PLANNER_RETRY_PERIOD_SECONDS": "0.5",
    "TRAINSCALER_KUBE_CACHE_SYNC_TIMEOUT": "20",
}


class Planner:
    """One ``trainscaler planner`` process (its own session: killed as a group)."""

    def __init__(self, name: str, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "workers.cli", "planner", "--loglevel", "info",
                 "--without-gossip", "--without-mingle"],
                cwd=REPO,
                env={**os.environ, **env, "TRAINSCALER_PLANNER_IDENTITY": name},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def kill9(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LoopbackApiServer, Path]]:
    server = LoopbackApiServer(host="127.0.0.1", port=0)
    server.start()
    try:
        server.add_node("node-a", cpu="16", memory="64Gi", gpus=4)
        install_crd(server.api_client())
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        server.stop()


def _holder(server: LoopbackApiServer) -> str:
    try:
        return _record(server).holder
    except KubeApiError:
        return ""


def _rounds_by(store: StateStore, pid: int) -> int:
    return sum(1 for run in store.runs() if f":{pid}:" in run.owner)


def test_two_planners_one_leads_and_the_standby_takes_over_after_kill_9(
    cluster: tuple[LoopbackApiServer, Path],
    procs: Procs,
    store: StateStore,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    server, kubeconfig = cluster
    env = {**procs.env, **PLANNER_ENV, "TRAINSCALER_KUBECONFIG": str(kubeconfig)}
    procs.env = env
    # Each planner serves its own /metrics (as each pod does), the standby included.
    ports = {name: free_port() for name in ("planner-a", "planner-b")}
    planners = {
        name: Planner(name, {**env, **metrics_env(port)}, tmp_path) for name, port in ports.items()
    }
    try:
        procs.beat("beat")
        leader_name = wait_for(
            lambda: _holder(server) if _holder(server) in planners else "",
            timeout=60,
            what="a planner holding the lease",
        )
        leader = planners[leader_name]
        standby = next(p for n, p in planners.items() if n != leader_name)
        wait_for(
            lambda: _rounds_by(store, leader.process.pid) >= 2,
            timeout=60,
            what=f"autoscale rounds by the leader; log: {leader.text()[-2000:]}",
        )
        # Exactly one leads: the standby is alive, waiting, and has run no round.
        assert standby.alive(), standby.text()[-3000:]
        assert _rounds_by(store, standby.process.pid) == 0
        assert "ready." not in standby.text()
        assert _holder(server) == leader_name
        # The standby's own endpoint answers: its Lease reads, no round.
        standby_url = f"http://127.0.0.1:{ports[standby.name]}/metrics"
        waiting = scrape_until(
            standby_url,
            lambda s: sample(s, "trainscaler_kube_api_requests_total", verb="GET", code="200") > 0,
            timeout=30,
            what="the standby's Lease reads counted",
        )
        assert sample(waiting, "trainscaler_autoscale_round_seconds_count") == 0
        leading = scrape(f"http://127.0.0.1:{ports[leader.name]}/metrics")
        assert sample(leading, "trainscaler_autoscale_round_seconds_count") >= 2

        transitions = _record(server).transitions
        # Killed in the middle of a round: it dies holding the round's lock.
        redis_client.set(f"{PREFIX}faults:pause:autoscale", "60")
        marker: Any = wait_for(
            lambda: redis_client.get(f"{PREFIX}faults:paused:autoscale") or b"",
            timeout=30,
            what="the leader paused inside a round",
        )
        assert (
            json.loads(str(marker, "utf-8") if isinstance(marker, bytes) else marker)["pid"]
            == leader.process.pid
        )
        leader.kill9()
        killed_at = time.monotonic()
        wait_for(
            lambda: _holder(server) == standby.name,
            timeout=30,
            interval=0.05,
            what="the standby holding the lease",
        )
        took = time.monotonic() - killed_at
        # client-go's bound: the lease duration after the last renewal the standby saw,
        # plus one retry period to notice (here 4 s + 0.5 s; slack for a loaded machine).
        lease_s = int(PLANNER_ENV["TRAINSCALER_PLANNER_LEASE_DURATION_SECONDS"])
        retry_s = float(PLANNER_ENV["TRAINSCALER_PLANNER_RETRY_PERIOD_SECONDS"])
        assert took <= lease_s + 2 * retry_s + 3.0, f"takeover took {took:.1f}s"
        print(f"takeover after kill -9: {took:.2f}s (lease {lease_s}s, retry {retry_s}s)")
        assert _record(server).transitions == transitions + 1
        # Rounds go on at once, not after the dead leader's round lock expires (120 s).
        wait_for(
            lambda: _rounds_by(store, standby.process.pid) >= 2,
            timeout=60,
            what=f"rounds by the new leader; log: {standby.text()[-2000:]}",
        )
        # The listener the standby started serves the worker it now runs (one bind).
        scrape_until(
            standby_url,
            lambda s: sample(s, "trainscaler_autoscale_round_seconds_count") >= 2,
            timeout=30,
            what="the new leader's rounds on its own endpoint",
        )
    finally:
        for planner in planners.values():
            planner.stop()


def test_a_planner_that_loses_its_lease_exits_nonzero(
    cluster: tuple[LoopbackApiServer, Path], procs: Procs, tmp_path: Path
) -> None:
    server, kubeconfig = cluster
    env = {**procs.env, **PLANNER_ENV, "TRAINSCALER_KUBECONFIG": str(kubeconfig)}
    planner = Planner("planner-x", env, tmp_path)
    try:
        wait_for(lambda: _holder(server) == "planner-x", timeout=60, what="planner-x leading")
        wait_for(lambda: "ready." in planner.text(), timeout=60, what="its worker ready")
        # Someone else takes the Lease (an operator, a split brain): the planner must stop.
        client = KubeClient(server.api_client())
        lease: dict[str, Any] = client.request("GET", LEASES.object_path(NS, LEASE))
        lease["spec"]["holderIdentity"] = "intruder"
        client.request("PUT", LEASES.object_path(NS, LEASE), body=lease)
        planner.process.wait(timeout=30)
        assert planner.process.returncode == LOST_LEASE_EXIT, planner.text()[-3000:]
    finally:
        planner.stop()
