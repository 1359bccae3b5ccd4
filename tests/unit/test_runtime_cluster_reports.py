"""Epoch reports reach the cluster policy (goodput) exactly once, in epoch order.

In process, against a real redis-server: ``schedule`` hands a cluster-managed
job's reports to the cluster policy's inbox in the compare-and-set that moves
the job's cursor; ``autoscale`` consumes them with the new policy state in one
compare-and-set. The oracle is arithmetic over the reports sent (epochs and
iterations the policy's books must hold), not the code under test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler_core.models import ElasticJob, EpochReport, Resources
from scheduler_core.policies.goodput import GoodputState
from tests.unit.runtime_fixtures import FixedClock, server
from workers import handlers
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.scaling import cluster_params
from workers.settings import Settings
from workers.wiring import Runtime

__all__ = ["server"]  # fixture used by name

pytestmark = pytest.mark.timeout(60)

PREFIX = DEFAULT_KEY_PREFIX
GPU = Resources(cpu_milli=1000, memory_mega=1000, gpu=1)


@pytest.fixture
def rt(server: EmbeddedRedis) -> Iterator[Runtime]:
    """A runtime with goodput as the cluster policy (the default) and a fixed clock."""
    runtime = Runtime(
        Settings(redis_url=server.url, scaler="recording", max_load_desired=1.0),
        clock=FixedClock(),
    )
    assert runtime.settings.cluster_policy == "goodput"
    runtime.redis.flushall()
    yield runtime
    runtime.redis.close()


def _cluster(rt: Runtime, *names: str) -> None:
    jobs = tuple(
        ElasticJob(
            name=name,
            min_replicas=1,
            max_replicas=8,
            current_replicas=1,
            requests=GPU,
            limits=GPU,
            policy="goodput",
            application="app/batch-64",
            total_epochs=20,
        )
        for name in names
    )
    StaticClusterReader(rt.redis, prefix=PREFIX).store(
        StaticCluster(
            nodes=(StaticNode(name="n1", cpu_milli=64_000, memory_mega=640_000, gpu=8),),
            jobs=jobs,
        )
    )


def _report(job: str, epoch: int, *, iterations: int = 100, at: float = 0.0) -> dict[str, object]:
    return EpochReport(
        job=f"default/{job}",
        replicas=1,
        epoch_time_s=50.0,
        epoch=epoch,
        total_epochs=20,
        iterations=iterations,
        nodes=1,
        at=at,
    ).model_dump(mode="json")


def _schedule(rt: Runtime) -> None:
    handlers.schedule_once(rt, send_scales=lambda _commands: None)


def _autoscale(rt: Runtime) -> dict[str, object]:
    return handlers.autoscale_once(rt, send_scale=lambda _command: None, owner="test")


def _books(rt: Runtime) -> GoodputState:
    raw = rt.store.cluster_policy_state("goodput")
    assert raw is not None
    return GoodputState.model_validate_json(raw)


def test_reports_of_a_job_the_planner_has_not_seen_yet_go_to_the_cluster_policy(
    rt: Runtime,
) -> None:
    _cluster(rt, "a")
    # Before any round: the job is known only to the cluster reader.
    handlers.accept_report(rt, _report("a", 1, iterations=120))
    _schedule(rt)
    assert rt.store.inbox_length("goodput") == 1
    assert rt.store.decisions("default/a") == []  # the job policy decided nothing
    _autoscale(rt)
    book = _books(rt).jobs["default/a"]
    assert (book.epochs_done, book.units_done) == (1, 120.0)
    assert rt.store.inbox_length("goodput") == 0


def test_each_report_is_counted_once_across_rounds_and_redeliveries(rt: Runtime) -> None:
    _cluster(rt, "a", "b")
    _autoscale(rt)  # the planner sees both jobs
    sent: dict[str, list[int]] = {"a": [], "b": []}
    for epoch in range(1, 7):
        for job in ("a", "b"):
            iterations = 100 + epoch
            payload = _report(job, epoch, iterations=iterations, at=float(epoch))
            handlers.accept_report(rt, payload)
            # A redelivered report_epoch pushes the same report again.
            if epoch % 2 == 0:
                handlers.accept_report(rt, payload)
            sent[job].append(iterations)
        _schedule(rt)
        if epoch % 3 == 0:
            _autoscale(rt)
    _autoscale(rt)
    books = _books(rt).jobs
    for job, counts in sent.items():
        book = books[f"default/{job}"]
        assert book.epochs_done == 6
        assert book.units_done == float(sum(counts))


def test_a_report_arriving_while_a_round_runs_goes_to_the_next_round(rt: Runtime) -> None:
    _cluster(rt, "a")
    _autoscale(rt)
    handlers.accept_report(rt, _report("a", 1, iterations=100))
    _schedule(rt)
    inbox = rt.store.read_cluster_round("goodput", limit=100)
    assert len(inbox.reports) == 1
    # Mid-round: another report is handed over after the round read the inbox.
    handlers.accept_report(rt, _report("a", 2, iterations=90))
    _schedule(rt)
    assert rt.store.commit_cluster_round(inbox, '{"jobs": {}, "apps": {}, "last_now": null}')
    left = rt.store.read_cluster_round("goodput", limit=100)
    assert [r.epoch for r in left.reports] == [2]


def test_a_round_whose_state_moved_on_commits_nothing(rt: Runtime) -> None:
    _cluster(rt, "a")
    handlers.accept_report(rt, _report("a", 1))
    _schedule(rt)
    stale = rt.store.read_cluster_round("goodput", limit=100)
    _autoscale(rt)  # another round consumed the report first
    assert not rt.store.commit_cluster_round(stale, "{}")
    assert _books(rt).jobs["default/a"].epochs_done == 1


def test_cluster_policy_params_come_from_settings_per_policy() -> None:
    settings = Settings(
        cluster_policy_params={"goodput": {"restart_s": 1.0, "max_load_desired": 0.5}},
        max_load_desired=0.9,
    )
    assert cluster_params("goodput", settings) == {"restart_s": 1.0, "max_load_desired": 0.5}
    assert cluster_params("edl", settings) == {"max_load_desired": 0.9}
    assert cluster_params("throughput", settings) == {}
