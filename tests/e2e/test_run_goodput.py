"""``trainscaler run`` under its default cluster policy, ``goodput``, end to end.

The embedded system (loopback API server with its controllers, Redis, a
Celery worker and beat, the HTTP API) runs the default job mix; the
ElasticJobs carry no policy (so the cluster policy plans them), their
application and epoch count, and report each epoch's seconds and iterations
through ``POST /job``. Asserted from the stored decisions' reasons and
numbers (the run's summary), never from timing:

* every ElasticJob that reported grew, and only on evidence: each grow's
  target is at most twice the efficient size its measurements gave (a probe
  of a curve still scaling) and never past its maximum;
* every plan ranks the jobs shortest remaining first: along the ranks, the
  ordering key (estimated remaining GPU-seconds, less aging, running jobs
  favoured) never decreases.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DURATION_S = 75


def test_reporting_jobs_grow_to_their_efficient_sizes_shortest_first(embedded_run) -> None:
    run = embedded_run(duration=DURATION_S)
    code = run.wait_exit(timeout=DURATION_S + 120)
    assert code == 0, run.output()[-4000:]
    summary = run.summary()
    assert summary["cluster_policy"] == "goodput"
    elastic = {name: job for name, job in summary["jobs"].items() if job["kind"] == "elasticjob"}
    assert elastic, summary["jobs"]
    for name, job in elastic.items():
        assert job["epochs"] >= 1, (name, job)
        grows = [d for d in job["decisions"] if d["rule"] == "goodput.grow"]
        assert grows, (name, job["decisions"])
        for decision in grows:
            numbers = decision["numbers"]
            assert decision["target"] > decision["current"], decision
            assert decision["target"] <= 2 * numbers["efficient_size"], decision
            if decision["target"] > numbers["efficient_size"]:
                assert numbers["probe"] == 1, decision
    ranked_plans = 0
    for plan in summary["plans"]:
        ranked = sorted(
            (d for d in plan if d["rule"].startswith("goodput.") and d["rule"] != "goodput.paused"),
            key=lambda d: d["numbers"]["rank"],
        )
        assert [d["numbers"]["rank"] for d in ranked] == list(range(len(ranked))), plan
        keys = [_order(d) for d in ranked]
        assert keys == sorted(keys), plan
        ranked_plans += len(ranked) > 1
    assert ranked_plans >= 3, summary["plans"]


def _order(decision: dict[str, Any]) -> float:
    value = decision["numbers"]["order_s"]
    assert isinstance(value, int | float), decision
    return float(value)
