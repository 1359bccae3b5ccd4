"""The runtime end to end with real Redis and real Celery workers."""

from __future__ import annotations

import pytest

from scheduler_core.models import EpochReport
from tests.integration.conftest import wait_for
from tests.integration.replay import replay_throughput

pytestmark = pytest.mark.timeout(90)


def test_reports_are_decided_and_scaled(procs, client_app, recorder, store) -> None:
    procs.worker("w1")
    reports = [
        EpochReport(job="default/a", replicas=2, epoch_time_s=None, epoch=0),
        EpochReport(job="default/a", replicas=2, epoch_time_s=10.0, epoch=1),
        EpochReport(job="default/a", replicas=3, epoch_time_s=9.0, epoch=2),
    ]
    for report in reports:
        result = client_app.send_task(
            "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
        ).get(timeout=20)
        assert result["ok"] is True
    expected = replay_throughput(reports)
    wait_for(
        lambda: (
            recorder.all_replicas().get("default/a") == expected
            and store.cursor("default/a").last_target == expected
        ),
        timeout=20,
        what=f"default/a at {expected}",
    )
    history = store.decisions("default/a")
    assert history and all(d.decision.reason.rule.startswith("throughput.") for d in history)


def test_submit_admits_from_the_wait_queue(procs, client_app, recorder, store) -> None:
    procs.worker("w1")
    request = {"model_type": "resnet", "batch_size": 64, "epochs": 3, "dataset": "cifar10"}
    request["options"] = {"default_parallelism": 3}
    result = client_app.send_task("trainscaler.submit", args=[request]).get(timeout=20)
    assert result["ok"] is True
    job = result["job"]
    assert store.get_job(job) is not None
    wait_for(lambda: recorder.all_replicas().get(job) == 3, timeout=20, what="admitted at 3")
    finished = client_app.send_task("trainscaler.finish", args=[job]).get(timeout=20)
    assert finished["job"] == job
    record = store.get_job(job)
    assert record is not None and record.finished_at is not None
