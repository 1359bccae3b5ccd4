"""``kill -9`` of a worker in the middle of ``schedule`` and of ``scale``.

The killed worker's work is redone by the other worker (its queue lease and
its unacked Celery message both expire), and the final replica counts are
exactly what the policy gives for the reports, applied once.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from scheduler_core.models import EpochReport
from tests.integration.conftest import PREFIX, wait_for
from tests.integration.replay import replay_throughput

pytestmark = pytest.mark.timeout(120)


def _reports(jobs: int, per_job: int, seed: int) -> dict[str, list[EpochReport]]:
    rng = random.Random(seed)
    out: dict[str, list[EpochReport]] = {}
    for j in range(jobs):
        job = f"default/k{j}"
        out[job] = [
            EpochReport(
                job=job,
                replicas=rng.randint(1, 6),
                epoch_time_s=None if e == 0 else round(rng.uniform(5, 15), 3),
                epoch=e,
            )
            for e in range(per_job)
        ]
    return out


def _paused(redis_client, point: str) -> dict[str, Any]:
    raw = redis_client.get(f"{PREFIX}faults:paused:{point}")
    value: dict[str, Any] = json.loads(raw) if raw else {}
    return value


def _send_all(client_app, reports: dict[str, list[EpochReport]]) -> None:
    for index in range(max(len(r) for r in reports.values())):
        results = [
            client_app.send_task(
                "trainscaler.report_epoch", args=[r[index].model_dump(mode="json")]
            )
            for r in reports.values()
            if index < len(r)
        ]
        assert all(result.get(timeout=30)["ok"] for result in results)


def test_kill9_in_the_middle_of_schedule(procs, client_app, redis_client, recorder, store) -> None:
    workers = {w.pid: w for w in (procs.worker("w1"), procs.worker("w2"))}
    # What recovers the killed run: its items' leases expire and beat's
    # sweep_leases returns them and sends schedule (the schedule message itself
    # is a trigger, not recorded for redelivery: UNRECORDED_TASKS).
    procs.beat("beat")
    reports = _reports(jobs=4, per_job=4, seed=1)
    redis_client.set(f"{PREFIX}faults:pause:schedule", "60")
    first = {job: r[:1] for job, r in reports.items()}
    _send_all(client_app, first)
    marker = wait_for(lambda: _paused(redis_client, "schedule"), timeout=20, what="paused schedule")
    redis_client.delete(f"{PREFIX}faults:pause:schedule")
    victim = workers.pop(marker["pid"])
    victim.kill9()
    survivor = next(iter(workers.values()))
    _send_all(client_app, {job: r[1:] for job, r in reports.items()})
    expected = {job: replay_throughput(r) for job, r in reports.items()}
    wait_for(
        lambda: (
            all(recorder.all_replicas().get(job) == want for job, want in expected.items())
            and all(store.cursor(job).last_target == want for job, want in expected.items())
        ),
        timeout=45,
        what=f"replicas {expected}; have {recorder.all_replicas()}",
    )
    assert survivor.alive()
    for job in reports:
        # Newest first: generations never go back, whatever the kill interleaved.
        generations = [d.generation for d in store.decisions(job)]
        assert generations == sorted(generations, reverse=True)


@pytest.mark.parametrize("point", ["scale", "scale_applied"])
def test_kill9_in_the_middle_of_scale(
    point, procs, client_app, redis_client, recorder, store
) -> None:
    workers = {w.pid: w for w in (procs.worker("w1"), procs.worker("w2"))}
    # What recovers the killed scale: the decision waits in the pending-scale
    # index, and beat's sweep_leases sends it again (the scale message is not
    # recorded for redelivery: UNRECORDED_TASKS).
    procs.beat("beat")
    job = "default/victim"
    redis_client.set(f"{PREFIX}faults:pause:{point}", "60")
    report = EpochReport(job=job, replicas=1, epoch=0)
    assert client_app.send_task(
        "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
    ).get(timeout=20)["ok"]
    marker = wait_for(lambda: _paused(redis_client, point), timeout=20, what=f"paused {point}")
    redis_client.delete(f"{PREFIX}faults:pause:{point}")
    workers.pop(marker["pid"]).kill9()
    expected = replay_throughput([report])
    wait_for(
        lambda: store.applied(job) is not None and store.applied(job).target == expected,
        timeout=45,
        what="scale redone by the other worker",
    )
    assert recorder.all_replicas()[job] == expected
    applied_calls = [e for e in recorder.applied_log() if e["job"] == job]
    # Killed before the write: applied once, by the survivor. Killed after it: the
    # survivor finds the job at its target and does not apply it again.
    assert len(applied_calls) == 1
    assert next(iter(workers.values())).alive()
