"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go does it.

The record is the Lease's spec: ``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime`` (MicroTime) and ``leaseTransitions``. Rules
(client-go ``leaderelection.tryAcquireOrRenew``):

- no Lease: create it, holding it (a 409 means someone else was first);
- another holder whose record was last seen changing less than
  ``leaseDurationSeconds`` ago (by this process's own monotonic clock, never
  the holder's timestamps: clocks of two machines may disagree) keeps it;
- otherwise write the record with the read ``resourceVersion`` (optimistic
  concurrency: of two candidates one gets a 409 and stays standby). Taking
  it over from another holder sets ``acquireTime`` and adds a transition;
  renewing one's own keeps both.

The leader renews every ``retry_period``; a renewal that has not succeeded
within ``renew_deadline`` of the last good one means the lease is lost (the
caller must stop leading at once). Releasing on shutdown empties the holder
so a standby takes over without waiting for expiry.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from scheduler_core.ports import Clock
from workers.adapters.kubernetes.client import (
    JsonObject,
    KubeApiError,
    KubeClient,
    KubeConnectionError,
)
from workers.adapters.kubernetes.kinds import ResourceKind

log = logging.getLogger(__name__)

LEASES = ResourceKind("coordination.k8s.io", "v1", "leases", "Lease")
CONFLICT, NOT_FOUND = 409, 404


def micro_time(seconds: float) -> str:
    """metav1.MicroTime: RFC 3339 with exactly six fractional digits, UTC."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """client-go's ``LeaderElectionRecord``, as the Lease's spec holds it."""

    holder: str
    duration_s: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def from_lease(cls, lease: JsonObject) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def claim(current: LeaseRecord | None, *, identity: str, duration_s: int, now: str) -> LeaseRecord:
    """The record ``identity`` writes to hold the lease (``current``: what it read)."""
    if current is None:
        return LeaseRecord(identity, duration_s, now, now, 0)
    if current.holder == identity:
        return replace(current, duration_s=duration_s, renew_time=now)
    # A takeover (also of a released lease, whose holder is empty): a transition.
    return LeaseRecord(identity, duration_s, now, now, current.transitions + 1)


def held_by_another(current: LeaseRecord, *, identity: str, observed_at: float, now: float) -> bool:
    """client-go: another holder's lease stands until ``duration`` after we saw it change."""
    if not current.holder or current.holder == identity:
        return False
    return now < observed_at + current.duration_s


@dataclass(frozen=True)
class ElectionTiming:
    """client-go's LeaseDuration / RenewDeadline / RetryPeriod (defaults 15 / 10 / 2 s)."""

    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}"
            )


@dataclass
class LeaderElector:
    """Acquires, renews and releases one Lease for ``identity``.

    ``clock`` is monotonic (expiry and deadlines); ``wall_clock`` gives the
    timestamps written into the Lease. Thread-safe enough for one acquiring
    thread followed by one renewing thread.
    """

    client: KubeClient
    namespace: str
    name: str
    identity: str
    clock: Clock
    wall_clock: Clock
    timing: ElectionTiming = field(default_factory=ElectionTiming)
    # What we last read and when (our clock) we saw it change.
    _observed: LeaseRecord | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)
    _last_renewed: float | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def path(self) -> str:
        return LEASES.object_path(self.namespace, self.name)

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this identity holds the lease afterwards."""
        now = self.clock.now()
        try:
            lease = self.client.request("GET", self.path)
        except KubeApiError as error:
            if error.status != NOT_FOUND:
                log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, error)
                return False
            return self._create(now)
        except KubeConnectionError as error:
            log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, error)
            return False
        current = LeaseRecord.from_lease(lease)
        with self._lock:
            if current != self._observed:
                self._observed, self._observed_at = current, now
            observed_at = self._observed_at
        if held_by_another(current, identity=self.identity, observed_at=observed_at, now=now):
            return False
        record = claim(
            current,
            identity=self.identity,
            duration_s=self.timing.lease_duration_s,
            now=micro_time(self.wall_clock.now()),
        )
        body = {**lease, "spec": {**(lease.get("spec") or {}), **record.spec()}}
        try:
            # The read resourceVersion rides along in metadata: a race loses with a 409.
            self.client.request("PUT", self.path, body=body)
        except (KubeApiError, KubeConnectionError) as error:
            log.info("lease %s/%s: write failed: %s", self.namespace, self.name, error)
            return False
        self._held(record, now)
        return True

    def _create(self, now: float) -> bool:
        record = claim(
            None,
            identity=self.identity,
            duration_s=self.timing.lease_duration_s,
            now=micro_time(self.wall_clock.now()),
        )
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.spec(),
        }
        try:
            self.client.request("POST", LEASES.collection_path(self.namespace), body=body)
        except (KubeApiError, KubeConnectionError) as error:
            # 409 AlreadyExists: another candidate created it first.
            log.info("lease %s/%s: create failed: %s", self.namespace, self.name, error)
            return False
        self._held(record, now)
        return True

    def _held(self, record: LeaseRecord, now: float) -> None:
        with self._lock:
            self._observed, self._observed_at = record, now
            self._last_renewed = now

    def acquire(self, stop: threading.Event) -> bool:
        """Block as standby until the lease is ours (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
                return True
            stop.wait(self.timing.retry_period_s)
        return False

    def renew_until_lost(self, stop: threading.Event) -> bool:
        """Renew every retry period until ``stop`` (True) or the lease is lost (False).

        Lost: no successful renewal within ``renew_deadline`` of the last one,
        or another holder seen in the record.
        """
        while not stop.wait(self.timing.retry_period_s):
            if self.try_acquire_or_renew():
                continue
            with self._lock:
                observed, last = self._observed, self._last_renewed
            if observed is not None and observed.holder not in ("", self.identity):
                log.error("lease %s/%s: now held by %s", self.namespace, self.name, observed.holder)
                return False
            if last is None or self.clock.now() - last >= self.timing.renew_deadline_s:
                log.error(
                    "lease %s/%s: not renewed within %.1fs",
                    self.namespace,
                    self.name,
                    self.timing.renew_deadline_s,
                )
                return False
        return True

    def release(self) -> bool:
        """Give the lease up (holder emptied, duration 1 s) if we still hold it."""
        try:
            lease = self.client.request("GET", self.path)
            current = LeaseRecord.from_lease(lease)
            if current.holder != self.identity:
                return False
            released = replace(current, holder="", duration_s=1)
            spec = {**(lease.get("spec") or {}), **released.spec()}
            self.client.request("PUT", self.path, body={**lease, "spec": spec})
        except (KubeApiError, KubeConnectionError) as error:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, error)
            return False
        return True
