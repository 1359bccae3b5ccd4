"""Concurrency and failure: 1000 concurrent reports, a flaky scaler, a dead scaler."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from scheduler_core.models import EpochReport
from tests.integration.conftest import PREFIX, wait_for
from tests.integration.replay import replay_throughput


def make_reports(
    jobs: int, per_job: int, *, seed: int, prefix: str = "r"
) -> dict[str, list[EpochReport]]:
    rng = random.Random(seed)
    out: dict[str, list[EpochReport]] = {}
    for j in range(jobs):
        job = f"default/{prefix}{j}"
        replicas = rng.randint(1, 4)
        reports = []
        for epoch in range(per_job):
            time_s = None if epoch == 0 else round(rng.uniform(8.0, 12.0), 4)
            reports.append(
                EpochReport(job=job, replicas=replicas, epoch_time_s=time_s, epoch=epoch)
            )
            replicas = max(1, replicas + rng.choice((-1, 0, 1)))
        out[job] = reports
    return out


def send_concurrently(client_app, reports: dict[str, list[EpochReport]]) -> None:
    """Every job sends its reports in epoch order, all jobs at once (a thread each)."""

    def run(job_reports: list[EpochReport]) -> None:
        for report in job_reports:
            result = client_app.send_task(
                "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
            ).get(timeout=60)
            assert result["ok"], result

    with ThreadPoolExecutor(max_workers=len(reports)) as pool:
        for future in [pool.submit(run, r) for r in reports.values()]:
            future.result(timeout=120)


def wait_for_replay(recorder, store, reports, *, timeout: float) -> dict[str, int]:
    expected = {job: replay_throughput(r) for job, r in reports.items()}

    def settled() -> bool:
        replicas = recorder.all_replicas()
        return all(
            replicas.get(job) == want and store.cursor(job).last_target == want
            for job, want in expected.items()
        )

    wait_for(settled, timeout=timeout, interval=0.2, what="every job at its replayed target")
    return expected


@pytest.mark.timeout(150)
def test_1000_concurrent_reports_from_50_jobs_match_in_order_replay(
    procs, client_app, recorder, store, dead_letters
) -> None:
    procs.worker("w1")
    procs.worker("w2")
    reports = make_reports(50, 20, seed=7)
    send_concurrently(client_app, reports)
    wait_for_replay(recorder, store, reports, timeout=60)
    assert dead_letters.count() == 0
    for job, job_reports in reports.items():
        assert store.cursor(job).last_epoch == job_reports[-1].epoch


@pytest.mark.timeout(180)
def test_scaler_failing_30_percent_converges(
    procs, client_app, redis_client, recorder, store, dead_letters
) -> None:
    redis_client.hset(
        f"{PREFIX}faults:scale", mapping={"fail_rate": "0.3", "statuses": "500,429,409"}
    )
    env = {"TRAINSCALER_SCALE_MAX_RETRIES": "25"}
    workers = [procs.worker("w1", extra_env=env), procs.worker("w2", extra_env=env)]
    reports = make_reports(10, 8, seed=11, prefix="flaky")
    send_concurrently(client_app, reports)
    wait_for_replay(recorder, store, reports, timeout=60)
    assert dead_letters.count() == 0
    logs = "".join(w.log_text() for w in workers)
    assert "retrying in" in logs and "injected HTTP" in logs, "the scaler really failed and retried"
    # Every job's newest decision is the one applied. A later decision that keeps
    # the count is still confirmed through the (30% failing) scaler, so its record
    # may lag the replica count by a few backed-off retries.

    def lagging() -> list[str]:
        return [
            job
            for job in reports
            if (applied := store.applied(job)) is None
            or applied.generation != store.generation(job)
        ]

    wait_for(lambda: not lagging(), timeout=60, interval=0.2, what="newest generation applied")
    assert lagging() == []


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("fault", "error"), [("500", "gave up after 3 retries"), ("404", "permanent")]
)
def test_always_failing_scaler_dead_letters(
    fault, error, procs, client_app, redis_client, recorder, dead_letters
) -> None:
    redis_client.hset(f"{PREFIX}faults:scale", mapping={"always_fail": fault})
    procs.worker("w1", extra_env={"TRAINSCALER_SCALE_MAX_RETRIES": "3"})
    report = EpochReport(job="default/doomed", replicas=1, epoch=0)
    assert client_app.send_task(
        "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
    ).get(timeout=20)["ok"]
    letters = wait_for(
        lambda: [d for d in dead_letters.list() if d.task == "trainscaler.scale"],
        timeout=30,
        what="a dead-lettered scale",
    )
    assert len(letters) == 1
    assert error in letters[0].error and f"HTTP {fault}" in letters[0].error
    assert letters[0].payload["job"] == "default/doomed"
    assert "default/doomed" not in recorder.all_replicas()
