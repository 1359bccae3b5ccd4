"""Beat's scheduler: RedBeat, kept alive through a Redis failover.

RedBeat retries its own Redis calls for ``retry_period`` seconds (its
``RetryingConnection``), but not the renewal of its single-beat lock: the lock
is a redis-py ``Lock`` on the raw client, and ``tick`` extends it first thing.
When the primary dies, that extension raises ``ConnectionError`` out of
``tick`` and Celery stops beat (``beat raised exception``), so the periodic
autoscale and lease sweeps end with the primary even though the sentinels
promote a replica a second later.

``FailoverTolerantScheduler`` treats a lost connection in ``tick`` as an
outage: it waits a short tick and tries again, for at most RedBeat's own
``retry_period``, then gives up as RedBeat would. If the outage outlived the
lock (it expired on the new primary), the lock is taken again only if no
other beat has taken it meanwhile; otherwise this beat stops, so two beats
never send the same schedule. After an outage the static schedule is
installed again, in case Redis came back without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from redbeat import RedBeatScheduler
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)

# Seconds between tries while Redis is unreachable: sentinels promote a replica
# within down-after-milliseconds plus an election, typically seconds.
OUTAGE_TICK = 0.5
# Without a configured retry_period RedBeat retries forever; bound it anyway.
DEFAULT_OUTAGE_LIMIT = 60.0


class FailoverTolerantScheduler(RedBeatScheduler):  # type: ignore[misc]
    """RedBeat whose ``tick`` survives a Redis failover (see the module docstring)."""

    monotonic: Callable[[], float] = staticmethod(time.monotonic)
    _outage_started: float | None = None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        try:
            interval: float = super().tick(*args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError) as error:
            return self._during_outage(error)
        except LockError:
            # The lock expired while Redis was away: retake it unless another beat has.
            if self.lock is None or not self.lock.acquire(blocking=False):
                logger.error("beat: lost the single-beat lock to another beat; stopping")
                raise
            logger.warning("beat: single-beat lock expired during an outage; taken again")
            self._recovered()
            return OUTAGE_TICK
        if self._outage_started is not None:
            self._recovered()
        return interval

    def _recovered(self) -> None:
        if self._outage_started is not None:
            logger.warning(
                "beat: Redis reachable again after %.1f s",
                self.monotonic() - self._outage_started,
            )
        self._outage_started = None
        # A primary that came back empty (no persistence, or a promoted replica
        # that missed the last writes) lost the schedule RedBeat keeps in Redis.
        # Installing it again is idempotent: RedBeat keeps each entry's stored
        # last_run_at, so nothing runs twice for it.
        self.setup_schedule()

    def _during_outage(self, error: Exception) -> float:
        now = self.monotonic()
        if self._outage_started is None:
            self._outage_started = now
        limit = self._outage_limit()
        if now - self._outage_started > limit:
            logger.error("beat: Redis unreachable for more than %.0f s; stopping", limit)
            raise error
        logger.warning("beat: Redis unreachable (%s); trying again in %.1f s", error, OUTAGE_TICK)
        return OUTAGE_TICK

    def _outage_limit(self) -> float:
        options = self.app.conf.get("redbeat_redis_options") or {}
        period = options.get("retry_period")
        return float(period) if period is not None and period >= 0 else DEFAULT_OUTAGE_LIMIT
