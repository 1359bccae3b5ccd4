"""``trainscaler run`` under its default cluster policy, ``goodput``, end to end.

The embedded system (loopback API server with its controllers, Redis, a
Celery worker and beat, the HTTP API) runs the default job mix; the
ElasticJobs carry no policy (so the cluster policy plans them), their
application and epoch count, and report each epoch's seconds and iterations
through ``POST /job``. Asserted from the stored decisions and from what the
jobs reported (the run's summary: every report each job sent, with its send
time, and every plan with its time), never from timing of the run itself:

* every ElasticJob that reported grew, and only on evidence: a grow's target
  is at most ``probe_factor`` (4) times the largest replica count the job
  had reported before that plan (rule goodput.reach: goodput may probe that
  far past what it measured, never further), and never past the job's
  maximum;
* shortest remaining first, with the oracle computed here from the reports:
  a job's remaining GPU-seconds at a plan lie between ``(N - k) x min(n x s_n)``
  and ``(N - k) x max(n x s_n)`` over the sizes n it reported (s_n: its
  reported epoch seconds at n; k: epochs reported by then, N: its epochs).
  goodput ranks by remaining GPU-seconds at one of the job's measured sizes,
  less ``aging`` x seconds waited, and counts a running job ``running_priority``
  times shorter; so whenever one job's upper bound is below half another's
  lower bound (less the most aging could give), the first must rank ahead.
  At least one such pair must be checked.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainscaler_sim.embedded.driver import DEFAULT_MIX

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DURATION_S = 75
# goodput's defaults (GoodputParams): a fact of the configuration under test,
# used only to widen the oracle's bounds.
AGING = 0.3
RUNNING_PRIORITY = 2.0
PROBE_FACTOR = 4.0
# A report sent this long before a plan has been handed to the policy by then.
DELIVERED_S = 15.0


def _reported_before(job: dict[str, Any], at: float) -> list[dict[str, float]]:
    return [r for r in job["reports"] if r["sent_at"] < at]


def _bounds(job: dict[str, Any], at: float) -> tuple[float, float] | None:
    """Remaining GPU-seconds of ``job`` at plan time ``at``, from its reports."""
    known = _reported_before(job, at)
    surely = _reported_before(job, at - DELIVERED_S)
    if not surely:
        return None
    per_epoch = [r["replicas"] * r["seconds"] for r in known]
    total = job["total_epochs"]
    done_most = max(int(r["epoch"]) for r in known)
    done_least = max(int(r["epoch"]) for r in surely)
    low = max(total - done_most, 0) * min(per_epoch)
    high = max(total - done_least, 0) * max(per_epoch)
    # Aging lowers a key by at most AGING x (seconds waited) x size; a job
    # waits at most from its submission to its first report.
    waited = max(0.0, job["reports"][0]["sent_at"] - (job["submitted_at"] or 0.0))
    largest = max(r["replicas"] for r in known)
    return low - AGING * waited * largest, high


def test_reporting_jobs_grow_to_their_efficient_sizes_shortest_first(embedded_run) -> None:
    run = embedded_run(duration=DURATION_S)
    code = run.wait_exit(timeout=DURATION_S + 120)
    assert code == 0, run.output()[-4000:]
    summary = run.summary()
    assert summary["cluster_policy"] == "goodput"
    elastic = {name: job for name, job in summary["jobs"].items() if job["kind"] == "elasticjob"}
    assert elastic, summary["jobs"]
    plans, times = summary["plans"], summary["plan_times"]
    assert len(plans) == len(times)
    epochs = {spec.name: spec.epochs for spec in DEFAULT_MIX}  # what each job trains for
    by_key = {}
    for name, job in elastic.items():
        job["total_epochs"] = epochs[name]
        by_key[job["key"]] = job
        assert job["epochs"] >= 1, (name, job)
        assert [r["epoch"] for r in job["reports"]] == list(range(1, len(job["reports"]) + 1))

    # Grows only on evidence, at most a probe past what the job measured.
    grown = set()
    for plan, at in zip(plans, times, strict=True):
        for decision in plan:
            job = by_key.get(decision["job"])
            if job is None or decision["rule"] != "goodput.grow":
                continue
            grown.add(decision["job"])
            reported = _reported_before(job, at)
            assert reported, decision
            assert decision["target"] > decision["current"], decision
            largest = max(r["replicas"] for r in reported)
            assert decision["target"] <= PROBE_FACTOR * largest, decision
    assert grown == set(by_key), (grown, sorted(by_key))

    # Shortest remaining first, against bounds computed from the reports.
    checked = 0
    for plan, at in zip(plans, times, strict=True):
        ranked = {
            d["job"]: d["numbers"]["rank"]
            for d in plan
            if d["job"] in by_key and d["rule"] not in ("goodput.unknown", "goodput.paused")
        }
        bounds = {key: _bounds(by_key[key], at) for key in ranked}
        for a, bound_a in bounds.items():
            for b, bound_b in bounds.items():
                if a == b or bound_a is None or bound_b is None:
                    continue
                # a's key at most its upper bound; b's at least half its lower bound.
                if bound_a[1] < bound_b[0] / RUNNING_PRIORITY:
                    checked += 1
                    assert ranked[a] < ranked[b], (at, a, bound_a, b, bound_b, plan)
    assert checked >= 3, (checked, [by_key[k]["reports"][:3] for k in by_key])
