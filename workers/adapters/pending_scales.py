"""The pending-scale index: which jobs have a decision that no scale has applied yet.

A ``scale`` message is not recorded for redelivery by the broker
(``UNRECORDED_TASKS`` in ``workers/celery_app.py``): a worker killed while
it holds one loses it. What is not lost is the decision itself, kept with
its generation when it was made. This index says which of them wait for a
scale, and since when:

* a decision that changes a job's target adds the job (score: the time it
  was made), in the same step that records it (the schedule's
  compare-and-set, ``record_autoscale_decision``);
* a scale that finds the job's newest generation applied removes it
  (``finish_scales``, ``set_applied``), and so does a dead letter of the
  newest generation (``settle_scale``): the operator's to replay;
* a retry moves its time on to when the retry is due (``postpone_scale``);
* ``sweep_leases`` sends again the newest decision of every job whose time
  is older than ``TRAINSCALER_SCALE_RESEND_AFTER`` (``due_scales``), and
  moves the time on.

A second scale of one generation changes nothing (``already applied``), so a
resend that crosses a slow scale costs a lock and no Kubernetes write.
Key: ``scales:pending``, a sorted set of job keys, under the runtime's prefix.
"""

from __future__ import annotations

from typing import Any

import redis

from workers.adapters.cluster_books import ClusterBooks
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_replies import text

PENDING_SCALES = "scales:pending"

# KEYS: the index, the job's generation counter. ARGV: the job, the generation
# settled (applied or dead-lettered). Only when it is the newest: a newer
# decision still waits for its own scale.
SETTLE = r"""
if tonumber(redis.call('GET', KEYS[2]) or '0') <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 1
"""


class PendingScales(ClusterBooks):
    """Reads and writes of the pending-scale index (see the module docstring)."""

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_KEY_PREFIX, history: int = 200
    ) -> None:
        super().__init__(client, prefix=prefix, history=history)
        self._settle = client.register_script(SETTLE)

    @property
    def pending_key(self) -> str:
        return self.key(PENDING_SCALES)

    def mark_pending(self, pipe: Any, job: str, *, at: float) -> None:
        """In ``pipe``: ``job`` waits for a scale since ``at``."""
        pipe.zadd(self.pending_key, {job: at})

    def settle_scale(self, job: str, *, generation: int) -> None:
        """``job``'s scale of ``generation`` is done with (applied or dead-lettered)."""
        self._settle(
            keys=[self.pending_key, self.key(f"job:{job}:generation")], args=[job, generation]
        )

    def postpone_scale(self, job: str, *, until: float) -> None:
        """A scale of ``job`` is under way until ``until`` (a retry, a resend): no
        resend before then. A job no longer pending stays so."""
        self.redis.zadd(self.pending_key, {job: until}, xx=True)

    def due_scales(self, *, before: float, limit: int) -> list[str]:
        """Jobs waiting for a scale since before ``before``, oldest first."""
        raw = self.redis.zrangebyscore(self.pending_key, "-inf", before, start=0, num=limit)
        return [text(job) for job in raw]

    def pending_scales(self) -> dict[str, float]:
        """Every pending job with its time (for views and tests)."""
        raw: Any = self.redis.zrange(self.pending_key, 0, -1, withscores=True)
        return {text(job): float(at) for job, at in raw}
