"""Which pods a ReplicaSet deletes first when it scales down: upstream's
``getPodsToDelete`` (pkg/controller/replicaset) with ``ActivePodsWithRanks``
(pkg/controller/controller_utils.go), features PodDeletionCost and
LogarithmicScaleDown on (their defaults).

Each pod's rank is the number of active pods related to the ReplicaSet (its
own and its sibling ReplicaSets', i.e. the Deployment's) on the pod's node,
counted once before deleting. Pods sort, cheapest to lose first, by:

1. unassigned before assigned;
2. phase Pending < Unknown < Running;
3. not ready before ready;
4. lower ``controller.kubernetes.io/pod-deletion-cost`` first;
5. higher rank first (pods doubled up on a node go first);
6. both ready, ready since different times: the one ready for less time
   first, comparing ``floor(log2(age in ns))`` buckets; in the same bucket,
   upstream compares UIDs;
7. more container restarts first;
8. created at different times: the newer first, by the same log2 buckets
   (same bucket: UIDs).

Where upstream's order is arbitrary (UIDs are random; pods equal on every
criterion keep whatever order Go's unstable sort and the informer's listing
give), this simulation decides the same way every time: the pod on the node
with the greatest name first, then the newest pod. That is one of the orders
a real cluster can produce.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}
# Returned by _by_age where upstream would compare UIDs.
_UID_TIE = 2


@dataclass(frozen=True)
class RankedPod:
    name: str
    node: str
    phase: str
    ready: bool
    deletion_cost: int
    related_on_node: int
    ready_since: datetime | None
    restarts: int
    created: datetime | None
    created_order: int


def _log2_bucket(moment: datetime, now: datetime) -> int:
    nanoseconds = (now - moment).total_seconds() * 1e9
    return int(math.log2(nanoseconds)) if nanoseconds > 0 else -1


def _arbitrary(a: RankedPod, b: RankedPod) -> int:
    """Upstream's random or unstable tie, decided reproducibly (see the module docstring)."""
    if a.node != b.node:
        return -1 if a.node > b.node else 1
    return (
        -1 if a.created_order > b.created_order else (1 if a.created_order < b.created_order else 0)
    )


def _by_age(a: datetime | None, b: datetime | None, *, now: datetime | None) -> int | None:
    """Newer first, by log2 age bucket; None when the times are equal (no decision)."""
    if a == b:
        return None
    if now is None or a is None or b is None:
        # afterOrZero: a zero time counts as newest.
        if a is None:
            return -1
        if b is None:
            return 1
        return -1 if a > b else 1
    difference = _log2_bucket(a, now) - _log2_bucket(b, now)
    if difference == 0:
        return _UID_TIE
    return -1 if difference < 0 else 1


def _compare(a: RankedPod, b: RankedPod, *, now: datetime | None) -> int:
    if bool(a.node) != bool(b.node):
        return -1 if not a.node else 1
    phase_a, phase_b = _PHASE_ORDINAL.get(a.phase, 0), _PHASE_ORDINAL.get(b.phase, 0)
    if phase_a != phase_b:
        return -1 if phase_a < phase_b else 1
    if a.ready != b.ready:
        return -1 if not a.ready else 1
    if a.deletion_cost != b.deletion_cost:
        return -1 if a.deletion_cost < b.deletion_cost else 1
    if a.related_on_node != b.related_on_node:
        return -1 if a.related_on_node > b.related_on_node else 1
    if a.ready and b.ready:
        decided = _by_age(a.ready_since, b.ready_since, now=now)
        if decided is not None:
            return _arbitrary(a, b) if decided == _UID_TIE else decided
    if a.restarts != b.restarts:
        return -1 if a.restarts > b.restarts else 1
    decided = _by_age(a.created, b.created, now=now)
    if decided is not None:
        return _arbitrary(a, b) if decided == _UID_TIE else decided
    return _arbitrary(a, b)


def deletion_order(pods: Sequence[RankedPod], *, now: datetime | None) -> list[RankedPod]:
    """``pods`` sorted cheapest to lose first."""

    def compare(a: RankedPod, b: RankedPod) -> int:
        return _compare(a, b, now=now)

    return sorted(pods, key=functools.cmp_to_key(compare))
