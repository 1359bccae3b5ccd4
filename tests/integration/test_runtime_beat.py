"""Two workers and two beat processes for 60 s against a changing cluster.

RedBeat must fire each periodic task once per interval (never from both
beats), autoscale runs must never overlap (single-flight lock), and no scale
may be applied twice (generations, idempotent scale).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import defaultdict

import pytest

from scheduler_core.models import ElasticJob, Resources
from tests.integration.conftest import PREFIX, wait_for
from workers.adapters.static_cluster import StaticCluster, StaticClusterReader, StaticNode

pytestmark = pytest.mark.timeout(150)

DURATION = 60.0
INTERVAL = 1.0


def _cluster(nodes: int) -> StaticCluster:
    jobs = tuple(
        ElasticJob(
            name=f"edl{i}",
            min_replicas=1,
            max_replicas=6,
            current_replicas=1,
            requests=Resources(cpu_milli=1000, memory_mega=1000),
            limits=Resources(cpu_milli=1000, memory_mega=1000),
            policy="edl",
        )
        for i in range(4)
    )
    return StaticCluster(
        nodes=tuple(
            StaticNode(name=f"n{i}", cpu_milli=4000, memory_mega=16000) for i in range(nodes)
        ),
        jobs=jobs,
    )


def test_two_workers_two_beats_for_60s(procs, redis_client, store, recorder) -> None:
    reader = StaticClusterReader(redis_client, prefix=PREFIX)
    reader.store(_cluster(2))
    workers = [procs.worker("w1"), procs.worker("w2")]
    beats = [procs.beat("b1"), procs.beat("b2")]
    wait_for(lambda: store.runs(limit=1), timeout=30, what="a first autoscale run")
    start = time.monotonic()
    sizes = [2, 4, 3, 1, 4]
    step = 0
    while time.monotonic() - start < DURATION:
        # The cluster grows and shrinks so plans keep changing replica counts.
        reader.store(_cluster(sizes[step % len(sizes)]))
        step += 1
        time.sleep(min(4.0, max(0.0, DURATION - (time.monotonic() - start))))
    for beat in beats:
        beat.stop()
    wait_for(
        lambda: not redis_client.llen("control") and not redis_client.llen("cluster-writes"),
        timeout=20,
        what="queues drained",
    )
    time.sleep(1.0)  # let a scale already taken off the queue finish (bounded)
    assert all(w.alive() for w in workers)

    runs = sorted(store.runs(), key=lambda r: r.started)
    assert all(r.note == "" for r in runs), [r.note for r in runs if r.note]
    for earlier, later in itertools.pairwise(runs):
        assert later.started >= earlier.finished, f"overlap: {earlier} / {later}"
    fired = len(runs) + store.skipped_runs()
    elapsed = time.monotonic() - start
    # One beat fires once per interval; two firing would double this.
    assert fired <= elapsed / INTERVAL * 1.3 + 5, (fired, elapsed)
    assert fired >= DURATION / INTERVAL * 0.5, (fired, elapsed)
    assert len({r.owner.split(":")[1] for r in runs}) == 2, "both workers took runs"

    applied = recorder.applied_log()
    assert len(applied) >= 10, "the changing cluster made the planner scale"
    per_job: dict[str, list[int]] = defaultdict(list)
    for entry in applied:
        match = re.search(r"\(generation (\d+)\)$", str(entry["reason"]))
        assert match, entry
        per_job[str(entry["job"])].append(int(match.group(1)))
    for job, generations in per_job.items():
        assert len(generations) == len(set(generations)), f"{job} applied twice: {generations}"
        assert generations == sorted(generations), f"{job} applied out of order: {generations}"
    plan = store.latest_plan()
    assert plan is not None and plan.plan.decisions
    assert all(d.reason.rule.startswith("edl.") for d in plan.plan.decisions)
    assert json.loads(plan.model_dump_json())["cluster"]["node_count"] >= 1
