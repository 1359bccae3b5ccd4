"""One job's estimate for a round: its curve, remaining time, rank and size.

``estimate`` turns a job and its books into a ``JobPlan``, the numbers the
ranked pass (``allocate``) and the explanation (``explain``) work from.

* **Curves.** Seconds per unit of work (iterations when reported) at each
  replica count, learned from the job's clean reports and from earlier jobs
  of the same application (``scheduler_core.curves``). A curve that still
  scales at its largest measured count is probed at twice that count when
  the predicted saving pays for the restart.
* **Remaining time** R(n) = remaining units x seconds per unit at n.
  Remaining units come from the application's measured total (an earlier job
  of it finished), else from (N - k) x the last epoch's units.
* **Order.** Jobs by remaining service, least first: (R at the threshold
  size - ``aging`` x seconds spent waiting) x the threshold size (so every
  wait is bounded; ``rank_by_service=False`` ranks by R alone), where the
  threshold size is the largest measured n with speedup(n)/n >=
  ``efficiency_threshold``. A running job counts as ``running_priority``
  times shorter (applied in ``allocate``), so only a clearly shorter job
  preempts it. A job with no estimate (no curve yet, or no epoch count N) is
  ranked at ``unknown_remaining_s``; one whose estimate has not settled
  (fewer than ``settle_epochs`` epochs and no finished job of its
  application) at most there; both are admitted only into GPUs that are free
  now, never by preempting.
* **Size** (rule ``goodput.queue``). Each job in turn gets its efficient
  size, as far as GPUs last: among its measured counts (and the probe,
  ``probe_factor`` x the largest, while the curve still scales at the
  threshold; rule goodput.reach) and the node-friendly counts between the
  measured ones (rule goodput.between, interpolated), the n that
  minimises R(n) x (1 + n x w), with w = (jobs in the cluster - 1) / GPUs.
  Holding n GPUs for R(n) seconds delays each other job by about n x R(n) /
  GPUs (fluid approximation), so this is the job's own time plus the delay it
  causes: alone, a job takes its fastest size; behind a long queue, the size
  with the fewest GPU-seconds. It replaced a fixed cut (the largest n with
  speedup(n)/n >= ``efficiency_threshold``): the efficiency curves are flat
  around 0.85-0.9 (cifar10/4096, deepspeech2/640, imagenet), so a 25% change
  of that cut moved sizes from 4 to 16 GPUs and the workloads 1-4 geomean by
  0.074. The threshold now only ranks and decides when a probe is due.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduler_core.curves import Curve
from scheduler_core.goodput_books import (
    GoodputApp,
    GoodputJob,
    SpreadPoint,
    is_running,
    remaining_units,
)
from scheduler_core.models import ElasticJob
from scheduler_core.policies.goodput.params import GoodputParams


@dataclass
class JobPlan:
    """One job's numbers while the plan is built."""

    job: ElasticJob
    book: GoodputJob
    running: int
    curve: Curve | None
    remaining_units: float | None
    efficient: int
    want: int
    probe: bool
    rank_s: float
    settled: bool
    alloc: int = 0
    rank: int = 0
    # The key the jobs were ordered by (rank_s, divided for a running job).
    order_s: float = 0.0
    placements: dict[str, int] = field(default_factory=dict)
    # Rule goodput.queue: the GPU price its size was chosen at (None: not by that rule).
    gpu_weight: float | None = None
    spread: list[SpreadPoint] = field(default_factory=list)
    # A start the admission rule refused (its size), 0 if none.
    refused_start: int = 0
    # A start deferred a round by rule goodput.soon (its size), 0 if none.
    deferred: int = 0
    # A grow held back by rule goodput.measure.
    unmeasured: bool = False
    # Rule goodput.spare: the probe a running job was refused (its size), 0 if none.
    spare_refused: int = 0
    # Rule goodput.protect: how long the start waits before preempting (s).
    protected_s: float = 0.0
    # Rule goodput.shape: the start's predicted node count and slowdown.
    shape_nodes: int = 0
    shape_factor: float = 1.0
    # Pods a grow is predicted to add, by node (MostAllocated on today's free GPUs).
    landed: dict[str, int] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.curve is not None and self.remaining_units is not None

    def remaining_s(self, replicas: int) -> float:
        if self.curve is None or self.remaining_units is None or replicas <= 0:
            return math.inf
        return self.remaining_units * self.curve.unit_time(replicas)


def estimate(
    job: ElasticJob,
    book: GoodputJob,
    *,
    apps: dict[str, GoodputApp],
    params: GoodputParams,
    weight: float,
    gpus_per_node: int,
) -> JobPlan:
    app = apps.get(book.application) if book.application is not None else None
    layers = [app.points if app is not None else [], book.points]
    curve: Curve | None = Curve.from_points(
        layers, threshold=params.efficiency_threshold, probe_factor=params.probe_factor
    )
    provisional = False
    if curve is not None and not curve.known and book.provisional is not None:
        curve = Curve.from_points(
            [[book.provisional]],
            threshold=params.efficiency_threshold,
            probe_factor=params.probe_factor,
        )
        provisional = True
    if curve is not None and not curve.known:
        curve = None
    remaining, settled = remaining_units(book, app, settle_epochs=params.settle_epochs)
    running = job.current_replicas if is_running(job) else 0
    requested = job.clamp(job.default_parallelism)
    if curve is None or remaining is None:
        # Nothing known: its requested size, ranked by a prior, only into free GPUs.
        rank_s = params.unknown_remaining_s - params.aging * book.waited_s
        if params.rank_by_service:
            rank_s *= requested
        return JobPlan(job, book, running, None, None, requested, requested, False, rank_s, False)
    if provisional:
        # Only a mixed or spread-out measurement: rank by it, size as asked.
        efficient, probe = requested, False
    else:
        efficient, probe = curve.efficient_size(job.max_replicas)
    efficient = job.clamp(efficient)
    # The rank keeps the threshold's size: remaining service at a size that
    # does not depend on how crowded the cluster is this round.
    rank_size = efficient
    sized = (
        None
        if provisional
        else curve.queue_size(
            weight,
            min_replicas=job.min_replicas,
            max_replicas=job.max_replicas,
            gpus_per_node=gpus_per_node,
        )
    )
    if sized is not None:
        # Rule goodput.queue: the size that pays for its GPUs at today's demand.
        size, probe = sized
        efficient = min(size, curve.largest)
    # Rule goodput.reach: a probe goes to probe_factor x the largest measured count.
    want = job.clamp(curve.probe_reach) if probe else efficient
    plan = JobPlan(job, book, running, curve, remaining, efficient, want, probe, 0.0, settled)
    plan.spread = app.spread if app is not None else []
    plan.gpu_weight = weight if sized is not None else None
    estimate = plan.remaining_s(rank_size)
    if not settled:
        # An unsettled estimate ranks no later than the blind prior and, like a
        # blind job, only takes free GPUs: it runs to learn, without preempting.
        estimate = min(estimate, params.unknown_remaining_s)
    plan.rank_s = estimate - params.aging * book.waited_s
    if params.rank_by_service:
        plan.rank_s *= rank_size
    return plan
