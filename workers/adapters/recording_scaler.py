"""A replica scaler that records applied targets in Redis, with fault injection.

Stands in for the Kubernetes scale subresource wherever no cluster is wanted
(integration tests, the benchmark, ``TRAINSCALER_SCALER=recording``): the
replica count in force per job lives in ``P recording:replicas`` (HASH) and
every call that changed it is appended to ``P recording:applied`` (LIST of
JSON ``{job, replicas, reason, policy, rule, limited_by, at, pid}``). A call
with the count already in force only confirms it: it is counted in ``P
recording:confirmed`` (HASH job -> calls), never logged as applied, so "no
scale applied twice" stays checkable from the log.

Fault injection (only when ``Settings.fault_injection`` is true, read per call
from Redis so a test can change it while workers run):

* ``P faults:scale`` HASH: ``fail_rate`` (0..1) with ``statuses`` (comma list,
  e.g. ``500,429,409``) picked at random; ``always_fail`` (a status) fails
  every call. 5xx, 429 and 409 raise ``TransientScaleError``; others
  ``PermanentScaleError``.
* ``P faults:pause:<point>`` STRING seconds: the first process to reach the
  named point takes (deletes) it and sleeps that long there (``schedule``, ``scale``, ``scale_applied``)
  after writing ``P faults:paused:<point>`` = ``{pid, detail}``, so a test
  knows which process to kill.
"""

from __future__ import annotations

import json
import os
import random
import time

import redis

from scheduler_core.ports import (
    Clock,
    PermanentScaleError,
    ScaleOutcome,
    ScaleRequest,
    TransientScaleError,
)

TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


class FaultInjector:
    """Test-only faults read from Redis; a no-op unless enabled in settings."""

    def __init__(
        self, client: redis.Redis, *, prefix: str, enabled: bool, rng: random.Random | None = None
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self.enabled = enabled
        self._rng = rng or random.Random()

    def pause(self, point: str, detail: str = "") -> None:
        if not self.enabled:
            return
        # One-shot: the first process to reach the point takes the pause.
        seconds = self._redis.getdel(f"{self._prefix}faults:pause:{point}")
        if not seconds:
            return
        marker = json.dumps({"pid": os.getpid(), "detail": detail})
        self._redis.set(f"{self._prefix}faults:paused:{point}", marker)
        time.sleep(min(float(seconds), 600.0))

    def scale_failure(self) -> int | None:
        """The HTTP status this call should fail with, or None."""
        if not self.enabled:
            return None
        raw = self._redis.hgetall(f"{self._prefix}faults:scale")
        if not raw:
            return None
        faults = {_text(k): _text(v) for k, v in raw.items()}
        if faults.get("always_fail"):
            return int(faults["always_fail"])
        rate = float(faults.get("fail_rate", "0"))
        statuses = [int(s) for s in faults.get("statuses", "500").split(",") if s.strip()]
        if statuses and self._rng.random() < rate:
            return self._rng.choice(statuses)
        return None


def raise_for_status(status: int, job: str) -> None:
    message = f"injected HTTP {status} scaling {job}"
    if status in TRANSIENT_STATUSES:
        raise TransientScaleError(message)
    raise PermanentScaleError(message)


# The count in force and the log entry, together (one round trip, atomic):
# returns the count found before; the count already in force is only confirmed.
_RECORD = """
local current = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
if current == ARGV[2] then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  return tonumber(current)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3])
return tonumber(current)
"""


class RecordingScaler:
    """``ReplicaScaler`` that keeps replica counts in Redis and logs each applied call."""

    def __init__(
        self, client: redis.Redis, *, prefix: str, clock: Clock, faults: FaultInjector
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._clock = clock
        self._faults = faults
        self._record = client.register_script(_RECORD)

    @property
    def replicas_key(self) -> str:
        return f"{self._prefix}recording:replicas"

    @property
    def log_key(self) -> str:
        return f"{self._prefix}recording:applied"

    def current_replicas(self, job: str) -> int:
        """The count in force (tests and the static cluster reader look here)."""
        value = self._redis.hget(self.replicas_key, job)
        return int(value) if value is not None else 0

    @property
    def confirmed_key(self) -> str:
        return f"{self._prefix}recording:confirmed"

    def scale(self, request: ScaleRequest) -> ScaleOutcome:
        job, replicas = request.job, request.replicas
        self._faults.pause("scale", job)
        status = self._faults.scale_failure()
        if status is not None:
            raise_for_status(status, job)
        entry = json.dumps(
            {
                "job": job,
                "replicas": replicas,
                "reason": request.reason_text(),
                "policy": request.policy,
                "rule": request.reason.rule,
                "limited_by": request.limited_by(),
                "at": self._clock.now(),
                "pid": os.getpid(),
            }
        )
        before = int(
            self._record(
                keys=[self.replicas_key, self.log_key, self.confirmed_key],
                args=[job, replicas, entry],
            )
        )
        if before != replicas:
            self._faults.pause("scale_applied", job)
        return ScaleOutcome(job=job, before=before, after=replicas)

    def all_replicas(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self._redis.hgetall(self.replicas_key).items()}

    def applied_log(self) -> list[dict[str, object]]:
        return [json.loads(x) for x in self._redis.lrange(self.log_key, 0, -1)]

    def confirmations(self) -> dict[str, int]:
        """Calls per job that found the count already in force (changed nothing)."""
        return {_text(k): int(v) for k, v in self._redis.hgetall(self.confirmed_key).items()}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
