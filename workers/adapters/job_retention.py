"""How long a finished job stays in Redis, and removing it afterwards.

Owns the retention of finished jobs (issue 16, "bounded Redis"): when a job
finishes, every key of it (``StateStore.job_keys``) gets the retention as its
TTL and the job enters ``P jobs:finished`` (ZSET job -> finished time). The
periodic sweep (``purge``) then takes jobs past their retention out of the
``P jobs`` index and deletes whatever of their keys is still there (a key
written after the finish, e.g. a late report, has no TTL), so every reader of
"all jobs" (the API's views and ``/metrics``) reads only live
and retained jobs.
"""

from __future__ import annotations

from typing import Final

from workers.adapters.redis_replies import text
from workers.adapters.state_store import StateStore

FINISHED: Final = "jobs:finished"

# KEYS: the finished ZSET, the jobs SET, then ARGV[2] keys per job, in ARGV's job
# order. ARGV: cutoff time, keys per job, the jobs. A job is removed only if it
# is still finished at or before the cutoff (checked here, atomically).
PURGE_FINISHED: Final = r"""
local cutoff, per_job = tonumber(ARGV[1]), tonumber(ARGV[2])
local purged = 0
for i = 3, #ARGV do
  local at = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if at and tonumber(at) <= cutoff then
    local first = 3 + (i - 3) * per_job
    for j = first, first + per_job - 1 do redis.call('DEL', KEYS[j]) end
    redis.call('SREM', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    purged = purged + 1
  end
end
return purged
"""


class JobRetention:
    """Finished jobs expire ``retention`` seconds after they finished."""

    def __init__(self, store: StateStore, *, retention: float, batch: int = 500) -> None:
        if retention <= 0:
            raise ValueError(f"retention must be positive, not {retention}")
        self._store = store
        self.retention = retention
        self._batch = batch
        self._purge = store.redis.register_script(PURGE_FINISHED)

    @property
    def finished_key(self) -> str:
        return self._store.key(FINISHED)

    def retire(self, job: str, *, at: float) -> None:
        """A job finished at ``at``: its keys expire after the retention (one round trip)."""
        ttl_ms = max(1, int(self.retention * 1000))
        pipe = self._store.redis.pipeline(transaction=True)
        pipe.zadd(self.finished_key, {job: at})
        for key in self._store.job_keys(job):
            pipe.pexpire(key, ttl_ms)
        pipe.execute()

    def purge(self, *, now: float) -> int:
        """Remove up to one batch of jobs past their retention; how many were removed."""
        cutoff = now - self.retention
        raw = self._store.redis.zrangebyscore(
            self.finished_key, "-inf", cutoff, start=0, num=self._batch
        )
        jobs = [text(j) for j in raw]
        if not jobs:
            return 0
        keys = [self.finished_key, self._store.key("jobs")]
        per_job = 0
        for job in jobs:
            job_keys = self._store.job_keys(job)
            per_job = len(job_keys)
            keys += job_keys
        return int(self._purge(keys=keys, args=[repr(float(cutoff)), per_job, *jobs]))

    def finished_count(self) -> int:
        return int(self._store.redis.zcard(self.finished_key))
