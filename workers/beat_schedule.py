"""The periodic work Celery beat triggers (run with the RedBeat scheduler).

RedBeat keeps the schedule and a lock in Redis, so two beat replicas never
double-fire: only the lock holder sends; the other takes over when it dies.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from workers.settings import Settings

AUTOSCALE = "trainscaler.autoscale"
SWEEP_LEASES = "trainscaler.sweep_leases"


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Entries for ``app.conf.beat_schedule``; each expires before its next run."""

    def entry(task: str, interval: float) -> dict[str, Any]:
        # A run that could not start before the next one is due is dropped, not piled up.
        return {
            "task": task,
            "schedule": timedelta(seconds=interval),
            "options": {"expires": interval},
        }

    return {
        "autoscale": entry(AUTOSCALE, settings.autoscale_interval),
        "sweep-leases": entry(SWEEP_LEASES, settings.lease_sweep_interval),
    }


def redbeat_lock_timeout(settings: Settings) -> int:
    """How long a dead beat's lock blocks the other replica: a few ticks, at least 5 s."""
    shortest = min(settings.autoscale_interval, settings.lease_sweep_interval)
    return max(5, int(shortest * 5))
