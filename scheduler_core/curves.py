"""Scaling curves learned from epoch reports, for the ``goodput`` policy.

A job's work is counted in *units*: iterations when its reports carry them
(``EpochReport.iterations``), else epochs. Each clean report (an epoch that
ran entirely at one size, after the last restart) gives one measurement of
seconds per unit at its replica count; measurements are averaged per replica
count. Only placements packed on the fewest nodes are kept, so a curve is
"seconds per unit at n replicas, packed".

A :class:`Curve` answers, from those points alone (no fitted shape):

* ``unit_time(n)``: measured where measured; between measured counts,
  interpolated linearly in GPU-seconds per unit; below the smallest, perfect
  scaling is assumed; above the largest, no further speedup, except that while
  the curve still scales (efficiency at the largest count >= the threshold) up
  to ``probe_factor`` x the largest count is predicted with the added
  replicas' gain discounted by the efficiency already lost (rule
  goodput.probe): that is the probe worth making;
* rule ``goodput.reach``: a probe goes to ``probe_factor`` (4) x the largest
  measured count, two doublings at once. KubeML adds one replica and finds
  the knee in n restarts, doubling in log2(n); quadrupling halves that again,
  and 4 x a power of two (or of a whole node) is still node-friendly. Every
  probe is an epoch at a size the curve has not confirmed, so a curve that
  scales to 32 from a start at 2 spent four epochs probing at doubling; the
  jobs that need large counts (imagenet, deepspeech2/640, cifar10/4096) ran
  most of their life below them. Measured (issue 18, docs/simulator.md,
  eighth try) with rule goodput.between: workloads 1-4 0.799 -> 0.770x
  Tiresias (0.760 with rule goodput.spare, which keeps a running job's
  probe to GPUs nobody holds), arrivals-1.5x 0.818 -> 0.772, every one of
  seven held-out variant families better; 3x and 8x were both worse than 4x;
* ``efficiency(n)``: speedup per replica against one replica (one replica's
  time is measured, or bounded by the best GPU-seconds per unit seen);
* rule ``goodput.single``: a one-replica point counts only while it is the
  only one. A single replica exchanges no gradients, so its time is off the
  curve that every multi-replica size is on (in the traces cifar10 is 0.84
  efficient at 2 replicas and ncf 0.40, then both scale smoothly). Kept, it
  made every larger size look inefficient and, under load, rule
  goodput.queue chose 1-GPU sizes that the next arrival preempted. Without it,
  efficiency is judged against the best multi-replica GPU-seconds and a size
  below the smallest measured count is predicted at linear scaling from it.
  Measured (issue 18, docs/simulator.md, seventh try): workloads 1-4
  0.806 -> 0.799x Tiresias, every variant family better, restarts per job at
  most 1.14 -> 1.03;
* ``efficient_size(threshold)``: the largest measured count whose efficiency
  is at least ``threshold``, and whether a probe beyond it is due;
* ``queue_size(weight)``: the size that pays for its GPUs when ``weight``
  other jobs per GPU compete for them (rule goodput.queue), among the
  measured counts, the probe and (rule ``goodput.between``) every
  node-friendly count between the smallest and largest measured one,
  predicted by the same interpolation in GPU-seconds ``unit_time`` uses: a
  curve measured at 4 and 16 may be best used at 8 or 12, which doubling
  probes never measure.

Everything is stdlib: this module is part of the pure core.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from scheduler_core.node_packing import node_friendly

# Rule goodput.reach: a probe goes to this many times the largest measured count
# (the goodput policy's default; GoodputParams.probe_factor).
DEFAULT_PROBE_FACTOR = 4.0


class CurvePoint(BaseModel):
    """Mean seconds per unit of work at ``replicas`` (packed), over ``samples`` epochs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int
    seconds_per_unit: float
    samples: int = 1


def add_point(
    points: list[CurvePoint], replicas: int, *, seconds_per_unit: float, limit: int
) -> list[CurvePoint]:
    """``points`` with one more measurement folded in; at most ``limit`` counts kept.

    Samples are capped so a count's mean keeps following slow drift.
    """
    out = [p for p in points if p.replicas != replicas]
    old = next((p for p in points if p.replicas == replicas), None)
    if old is None:
        new = CurvePoint(replicas=replicas, seconds_per_unit=seconds_per_unit)
    else:
        samples = min(old.samples, 15)
        mean = (old.seconds_per_unit * samples + seconds_per_unit) / (samples + 1)
        new = CurvePoint(replicas=replicas, seconds_per_unit=mean, samples=samples + 1)
    out.append(new)
    if len(out) > limit:
        # Keep the most sampled counts, always including the newest one.
        keep = sorted(out[:-1], key=lambda p: (-p.samples, p.replicas))[: limit - 1]
        out = [*keep, new]
    return sorted(out, key=lambda p: p.replicas)


@dataclass(frozen=True)
class Curve:
    """Seconds per unit by replica count, from measured points."""

    replicas: tuple[int, ...]
    seconds: tuple[float, ...]
    threshold: float
    probe_factor: float = DEFAULT_PROBE_FACTOR

    @classmethod
    def from_points(
        cls,
        layers: Iterable[Iterable[CurvePoint]],
        *,
        threshold: float,
        probe_factor: float = DEFAULT_PROBE_FACTOR,
    ) -> Curve:
        """Later layers override earlier ones at the same count (job over application).

        Rule goodput.single: once a count of 2 or more is measured, the
        one-replica point is left out (see the module docstring).
        """
        if probe_factor <= 1:
            raise ValueError(f"probe_factor must be above 1, got {probe_factor}")
        table: dict[int, float] = {}
        for layer in layers:
            for point in layer:
                if point.seconds_per_unit > 0 and point.replicas > 0:
                    table[point.replicas] = point.seconds_per_unit
        if len(table) > 1:
            table.pop(1, None)
        ordered = sorted(table)
        return cls(tuple(ordered), tuple(table[n] for n in ordered), threshold, probe_factor)

    @property
    def known(self) -> bool:
        return bool(self.replicas)

    @property
    def largest(self) -> int:
        return self.replicas[-1] if self.replicas else 0

    @property
    def probe_reach(self) -> int:
        """Rule goodput.reach: the count a probe goes to (above the largest measured)."""
        return max(math.floor(self.probe_factor * self.largest), self.largest + 1)

    def one_replica_time(self) -> float:
        if self.replicas and self.replicas[0] == 1:
            return self.seconds[0]
        return min(n * t for n, t in zip(self.replicas, self.seconds, strict=True))

    def efficiency(self, replicas: int) -> float:
        return self.one_replica_time() / (replicas * self.unit_time(replicas))

    def still_scaling(self) -> bool:
        """The largest measured count is still efficient: a larger one may be too."""
        return self.known and self.efficiency(self.largest) >= self.threshold

    def unit_time(self, replicas: int) -> float:
        ns, ts = self.replicas, self.seconds
        if not ns:
            raise ValueError("no measurements")
        if replicas <= ns[0]:
            return ts[0] * ns[0] / max(replicas, 1)
        if replicas >= ns[-1]:
            top = ns[-1]
            if replicas > top and self.still_scaling():
                return self._probe_time(min(replicas, self.probe_reach))
            return ts[-1]
        i = bisect.bisect_left(ns, replicas)
        if ns[i] == replicas:
            return ts[i]
        n0, n1 = ns[i - 1], ns[i]
        g0, g1 = n0 * ts[i - 1], n1 * ts[i]
        return (g0 + (g1 - g0) * (replicas - n0) / (n1 - n0)) / replicas

    def _probe_time(self, replicas: int) -> float:
        """Seconds per unit predicted at ``replicas`` (top < replicas <= the probe's reach).

        Rule goodput.probe: the relative gain of the added replicas is
        discounted by the efficiency the curve has already lost at its top:
        speedup over the top = 1 + (replicas / top - 1) x efficiency(top).
        At efficiency 1 this is perfect scaling; a curve at 0.7 is predicted
        to gain 70% of a perfect doubling, not all of it. It replaced perfect
        scaling up to twice the top, which made whether a probe was due
        (``efficiency_threshold``) decide how much it promised: at a threshold
        of 0.675 imagenet probed to 48-64 GPUs on promises its curve had
        already broken and was shrunk back by every arrival (issue 18).
        """
        top = self.largest
        gain = 1 + (replicas / top - 1) * self.efficiency(top)
        return self.seconds[-1] / gain

    def efficient_size(self, max_replicas: int) -> tuple[int, bool]:
        """(largest measured count at or above the threshold, probe beyond it due)."""
        best = self.replicas[0]
        for n in self.replicas:
            if n <= max_replicas and self.efficiency(n) >= self.threshold:
                best = n
        best = min(best, max_replicas)
        probe = self.still_scaling() and self.largest < max_replicas and best == self.largest
        return best, probe

    def queue_size(
        self, weight: float, *, min_replicas: int, max_replicas: int, gpus_per_node: int
    ) -> tuple[int, bool] | None:
        """Rule goodput.queue: (size, probe) minimising t(n) x (1 + n x ``weight``).

        t(n) is seconds per unit; times the job's remaining units (a constant
        factor) it is the remaining time R(n). Holding n GPUs for R(n) seconds
        delays every other job in the cluster by about n x R(n) / cluster GPUs
        (fluid approximation), so with ``weight`` = other jobs / cluster GPUs
        the objective is the job's own time plus the delay it causes.
        Candidates: the measured counts within [min, max], every node-friendly
        count between the smallest and the largest measured (rule
        goodput.between, interpolated) and, while the curve still scales, the
        probe (rule goodput.reach, clamped to the bounds).
        Alone, a job takes its fastest size; behind a long queue, the size
        with the fewest GPU-seconds. Ties go to the smaller size. ``None``
        when no candidate is within bounds.
        """
        between = (
            n
            for n in range(self.replicas[0] + 1, self.largest)
            if node_friendly(n, gpus_per_node) == n
        )
        candidates = [n for n in (*self.replicas, *between) if min_replicas <= n <= max_replicas]
        if self.still_scaling() and self.largest < max_replicas:
            candidates.append(min(max(self.probe_reach, min_replicas), max_replicas))
        if not candidates:
            return None
        best = min(candidates, key=lambda n: (self.unit_time(n) * (1 + n * weight), n))
        return best, best > self.largest


def packed_nodes(replicas: int, gpus_per_node: int) -> int:
    """Fewest nodes that hold ``replicas`` one-GPU replicas."""
    return -(-replicas // max(gpus_per_node, 1))
