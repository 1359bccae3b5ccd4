"""The runtime's metrics, end to end, scraped from each real process the Prometheus way.

* A solo worker (the planner's shape) serves its own ``/metrics``: an autoscale
  round that changes a job shows there as the round, the decision and the scale.
* A prefork worker in multiprocess mode merges its children: counters survive a
  child's exit, the live gauge of pool processes does not count dead children,
  and a previous run's files are removed at start.
* Celery's task metrics come from a real Flower process's ``/metrics``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from scheduler_core.models import ElasticJob, EpochReport, Reason, Resources
from tests.integration.conftest import PREFIX, Procs, wait_for
from tests.integration.metrics_scrape import Samples, metrics_env, sample, scrape, scrape_until
from workers.adapters.redis_server import free_port
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode
from workers.scaling import ScaleCommand

pytestmark = pytest.mark.timeout(150)

JOB = "default/grow"


def _cluster() -> StaticCluster:
    job = ElasticJob(
        name="grow",
        min_replicas=1,
        max_replicas=3,
        current_replicas=1,
        requests=Resources(cpu_milli=1000, memory_mega=1000),
        limits=Resources(cpu_milli=1000, memory_mega=1000),
        policy="edl",
    )
    return StaticCluster(
        nodes=(StaticNode(name="n1", cpu_milli=4000, memory_mega=16000),), jobs=(job,)
    )


def test_an_autoscale_round_with_a_change_shows_in_the_workers_own_metrics(
    procs, client_app, redis_client, store, recorder
) -> None:
    StaticClusterReader(redis_client, prefix=PREFIX).store(_cluster())
    port = free_port()
    procs.worker("w1", extra_env=metrics_env(port))
    url = f"http://127.0.0.1:{port}/metrics"
    result = client_app.send_task("trainscaler.autoscale").get(timeout=30)
    assert result["ran"] is True and result["changes"] == 1
    wait_for(lambda: store.applied(JOB), timeout=30, what="the planned scale applied")
    assert recorder.all_replicas()[JOB] == 3

    # The scale's counter is counted just after the applied target: wait for it.
    samples = scrape_until(
        url,
        lambda s: sample(s, "trainscaler_scale_operations_total", result="scaled") == 1,
        timeout=10,
        what="the scale counted",
    )
    assert sample(samples, "trainscaler_autoscale_round_seconds_count") == 1
    assert sample(samples, "trainscaler_decisions_total", policy="edl", direction="up") == 1
    assert sample(samples, "trainscaler_worker_pool_processes") == 1
    # Nothing about them is kept in Redis: no key of the old Redis-backed counters.
    assert not redis_client.keys(f"{PREFIX}metrics:*")

    # The EDL-managed job reports an epoch: kept, but throughput must not rescale it.
    report = EpochReport(job=JOB, replicas=3, epoch=0)
    assert client_app.send_task(
        "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
    ).get(timeout=20)["ok"]
    wait_for(lambda: store.last_report(JOB), timeout=20, what="the report kept")
    assert all(d.source == "autoscale" for d in store.decisions(JOB))
    assert recorder.all_replicas()[JOB] == 3 and len(recorder.applied_log()) == 1


def test_a_prefork_worker_merges_its_children_and_forgets_dead_ones(
    procs: Procs, client_app, redis_client, store, tmp_path: Path
) -> None:
    StaticClusterReader(redis_client, prefix=PREFIX).store(_cluster())
    directory = tmp_path / "prometheus"
    directory.mkdir()
    # A previous container's file in the pod's emptyDir: unreadable, so a scrape
    # that merged it would fail. The worker removes it before its children start.
    (directory / "counter_4242.db").write_bytes(b"left over by an earlier run")
    port = free_port()
    worker = procs.worker(
        "pf",
        pool="prefork",
        concurrency=2,
        # Every child exits after one task: children come and go during the test.
        extra_args=("--max-tasks-per-child", "1"),
        extra_env=metrics_env(port, directory),
    )
    url = f"http://127.0.0.1:{port}/metrics"
    assert not (directory / "counter_4242.db").exists()

    assert client_app.send_task("trainscaler.autoscale").get(timeout=30)["changes"] == 1
    wait_for(lambda: store.applied(JOB), timeout=30, what="the planned scale applied")
    for _ in range(4):
        client_app.send_task("trainscaler.noop").get(timeout=30)

    def merged(samples: Samples) -> bool:
        counted = sample(samples, "trainscaler_scale_operations_total", result="scaled") == 1
        # Two live children: the replaced ones' live gauges are gone (mark_process_dead).
        return counted and sample(samples, "trainscaler_worker_pool_processes") == 2

    samples = scrape_until(url, merged, timeout=30, what="children merged, dead ones forgotten")
    # Counted by children that have exited since (one task each): counters survive them.
    assert sample(samples, "trainscaler_autoscale_round_seconds_count") == 1
    assert sample(samples, "trainscaler_decisions_total", policy="edl", direction="up") == 1
    pids_with_files = {p.stem.rsplit("_", 1)[1] for p in directory.glob("*.db")}
    assert len(pids_with_files) >= 3, pids_with_files  # more children than are alive now
    live_files = list(directory.glob("gauge_livesum_*.db"))
    assert len(live_files) == 2, live_files
    assert worker.alive()


def _scale_command(job: str) -> dict[str, object]:
    return ScaleCommand(
        job=job,
        target=2,
        generation=1,
        reason=Reason(rule="test", message="scale from the test"),
        source="schedule",
    ).model_dump(mode="json")


def test_a_prefork_workers_endpoint_sums_the_scales_of_both_children(
    procs: Procs, client_app, redis_client, recorder, tmp_path: Path
) -> None:
    """Two children each count one scale; one scrape of the pod's port shows both.

    Without multiprocess mode the endpoint serves the main process's registry,
    which never runs a task: it would show 0, not 2.
    """
    directory = tmp_path / "prometheus"
    port = free_port()
    procs.worker(
        "pf2",
        pool="prefork",
        concurrency=2,
        queues="cluster-writes",
        # Longer than the pause below: the held message must not be redelivered.
        extra_env={**metrics_env(port, directory), "TRAINSCALER_BROKER_VISIBILITY_TIMEOUT": "120"},
    )
    url = f"http://127.0.0.1:{port}/metrics"
    # The first scale holds its child inside the scaler, so the second one can
    # only run in the other child (prefetch 1, late acks: a busy child takes nothing).
    redis_client.set(f"{PREFIX}faults:pause:scale", "20")
    client_app.send_task("trainscaler.scale", args=[_scale_command("default/first")])
    paused = wait_for(
        lambda: redis_client.get(f"{PREFIX}faults:paused:scale"),
        timeout=30,
        what="the first scale paused in its child",
    )
    first_pid = json.loads(paused)["pid"]
    client_app.send_task("trainscaler.scale", args=[_scale_command("default/second")])
    wait_for(lambda: len(recorder.applied_log()) == 2, timeout=60, what="both scales applied")
    applied_by = {str(entry["job"]): entry["pid"] for entry in recorder.applied_log()}
    assert applied_by["default/first"] == first_pid
    assert applied_by["default/second"] != first_pid, applied_by  # the other child

    samples = scrape_until(
        url,
        lambda s: sample(s, "trainscaler_scale_operations_total", result="scaled") >= 2,
        timeout=20,
        what="both children's scales summed",
    )
    assert sample(samples, "trainscaler_scale_operations_total", result="scaled") == 2
    assert sample(samples, "trainscaler_worker_pool_processes") == 2
    # Each child wrote its own file: the sum is the endpoint's merge, not one process.
    counted_by = {int(p.stem.rsplit("_", 1)[1]) for p in directory.glob("counter_*.db")}
    assert {applied_by["default/first"], applied_by["default/second"]} <= counted_by


def test_flower_serves_celery_task_metrics(procs: Procs, client_app) -> None:
    procs.worker("fw", heartbeat=True)  # as deployed: its event dispatcher exists
    port = free_port()
    # Flower as deployed: basic auth on its UI; its /metrics is scraped without credentials.
    flower = procs.flower("flower", port=port, args=("--basic-auth=ops:secret",))
    url = f"http://127.0.0.1:{port}/metrics"

    def noop_counted() -> Samples | None:
        assert flower.alive(), flower.log_text()[-3000:]
        # Flower turns task events on by broadcast once it runs: keep sending until it counts.
        client_app.send_task("trainscaler.noop").get(timeout=30)
        try:
            samples = scrape(url)
        except httpx.HTTPError:
            return None  # not listening yet
        return samples if _noop(samples, "flower_events_total", type="task-succeeded") else None

    samples = wait_for(noop_counted, timeout=60, interval=0.5, what="Flower counting noop")
    assert samples is not None
    assert _noop(samples, "flower_task_runtime_seconds_count") >= 1
    assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 401


def _noop(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` for trainscaler.noop on worker fw (Flower labels it fw@<host>)."""
    return sum(
        value
        for (sample_name, pairs), value in samples.items()
        if sample_name == name
        and ("task", "trainscaler.noop") in pairs
        and dict(pairs).get("worker", "").startswith("fw@")
        and all((k, v) in pairs for k, v in labels.items())
    )
