"""``CeleryClient`` against a real redis-server: what a reporter leaves behind."""

from __future__ import annotations

import pytest
import redis

from scheduler_core.models import EpochReport
from workers.client import CeleryClient, ReportNotConfirmed
from workers.settings import Settings

pytestmark = pytest.mark.timeout(60)


def test_a_report_never_answered_leaves_no_result_subscription(
    settings: Settings, redis_client: redis.Redis
) -> None:
    # No worker runs: every wait times out and the reporter re-sends, then gives up.
    client = CeleryClient(settings)
    report = EpochReport(job="default/unanswered", replicas=1, epoch_time_s=10.0, epoch=1)
    try:
        with pytest.raises(ReportNotConfirmed):
            client.report_confirmed(report, timeout=0.2, attempts=3)
        # Each wait that timed out was dropped: no result channel stays subscribed
        # (before, one per timeout until the app was freed, and its __del__ then
        # unsubscribed from whatever Redis was there by that time).
        assert redis_client.pubsub_channels("celery-task-meta-*") == []
        # The three sends are all queued: nothing was lost by giving up waiting.
        assert redis_client.llen("events") == 3
    finally:
        client.close()
