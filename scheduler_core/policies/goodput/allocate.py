"""The ranked pass: who gets GPUs this round, and when a start waits instead.

``allocate`` walks the jobs in rank order (``plan.estimate``; a running job
counts ``running_priority`` times shorter) and gives each its size as far as
the budget lasts, then shares what is left.

* **Blind jobs** (no estimate, or one not settled) keep what they run with
  and grow only into GPUs nobody holds; a blind start keeps the packing hint:
  the largest size that fits on the fewest nodes, when that is at least half.
* **Admission** (rule ``goodput.admit``). A job that would start with less
  than ``start_fraction`` (0.5) of its efficient size waits instead: the
  GPUs left for it are the ones the next shorter arrival takes back, so such
  a start buys a minute of progress for a 30 s restart and a preemption
  (measured: imagenet started with 1-2 GPUs and was preempted within two
  rounds over and over). After ``admit_patience_s`` (3600 s) of waiting any
  start is taken, so no job starves on this rule.
* **Measure before resizing** (rule ``goodput.measure``). A running job at
  ``start_fraction`` of its efficient size or more is not grown voluntarily
  until a clean epoch at its current size has been reported: a resize inside
  an epoch measures nothing and was the main source of resizes reversed
  within three rounds. Forced shrinks are not affected; a job far below its
  size (a patience start) may grow at once.
* **Probes only into spare GPUs** (rule ``goodput.spare``). A running job's
  probe (a size beyond every count its curve measured) takes only GPUs that
  nobody holds: it never shrinks or preempts a running job for a gain the
  curve has not confirmed, and the job keeps at least its largest measured
  count. Measured (issue 18, eighth try): with probes at 4x (rule
  ``goodput.reach``) the wider probes took GPUs from the longest running
  jobs; capping them gives a better geomean on workloads 1-4 and on every
  variant family, single run and ensemble. A start's probe is not capped:
  the start is priced by ``goodput.protect``, and capping it measured worse.
* **Wait for GPUs that come free** (rule ``goodput.soon``). A start that
  would take GPUs from running jobs waits when jobs predicted to finish
  within the horizon free them: one round (the time since the last round)
  plus two restarts priced as the hold rule prices one
  (``2 x hold_factor x restart_s``).
* **Protection proportional to the work lost** (rule ``goodput.protect``).
  A start that would still take GPUs from running jobs (the lowest-ranked,
  which the ranked pass shrinks first) waits, counted in its ``waited_s``,
  as long as the restart it causes costs: per victim ``restart_s`` x (1 +
  its GPUs x waiting jobs / cluster GPUs), its own pause plus its idle GPUs'
  share of the delay of every waiting job. The widest, longest jobs
  (imagenet) were shrunk and regrown 20-45 times each on workloads 1-4
  before this.
* **Leftovers** go, a chunk at a time, to the job whose remaining time drops
  most per added GPU, within its measured range, under the hold rule
  (``shape.worth``).
* GPUs in use never pass the budget (``max_load_desired`` x ``gpu_total``);
  targets stay within [min, max] or are 0 (preempted: no replicas); paused
  jobs are untouched. The placement itself is the cluster's (kube-scheduler).
"""

from __future__ import annotations

import math

from scheduler_core.node_packing import FreeGpus, node_friendly, packable, take_packed
from scheduler_core.policies.goodput.params import GoodputParams
from scheduler_core.policies.goodput.plan import JobPlan
from scheduler_core.policies.goodput.shape import land, shape_s, start_shape, worth


def allocate(
    plans: list[JobPlan],
    budget: int,
    *,
    node_free: dict[str, int],
    gpus_per_node: int,
    params: GoodputParams,
    interval_s: float = 0.0,
) -> None:
    for plan in plans:
        if plan.job.paused:
            plan.alloc = plan.running
            budget -= plan.running

    def key(plan: JobPlan) -> tuple[float, float, str]:
        rank_s = plan.rank_s
        if plan.running:
            rank_s = rank_s / params.running_priority if rank_s > 0 else rank_s
        return (rank_s, plan.book.arrival, plan.job.key)

    order = sorted((p for p in plans if not p.job.paused), key=key)
    free = FreeGpus(node_free)
    # Free GPUs that no job holds now: the only room an unknown job may take.
    unclaimed = free.total()
    # Rule goodput.soon: GPUs of jobs predicted to finish within the horizon come
    # free without taking anything from anyone. Taking them from a running job
    # costs it two restarts (now and when it gets them back), each priced as
    # the hold rule prices one (hold_factor x restart_s): a start waits for
    # GPUs that free up within the next round plus that price.
    horizon_s = interval_s + 2 * params.hold_factor * params.restart_s if interval_s else 0.0
    soon = sum(
        p.running for p in order if p.running and p.known and p.remaining_s(p.running) <= horizon_s
    )
    # GPUs kept for starts deferred to the next round (leftovers leave them).
    deferred = 0
    waiting = sum(1 for p in order if p.running == 0)
    budget_total = max(budget, 1)
    for rank, plan in enumerate(order):
        plan.rank = rank
        plan.order_s = key(plan)[0]
        want = plan.want
        if not plan.known or not plan.settled:
            # Blind: keep what it runs with, grow only into GPUs nobody holds.
            size = min(max(plan.running, min(want, plan.running + unclaimed)), budget)
            if size != plan.running:
                size = node_friendly(size, gpus_per_node)
        else:
            size = node_friendly(min(want, budget), gpus_per_node)
            if plan.running and plan.probe and size > plan.efficient:
                # Rule goodput.spare: a running job probes only into GPUs nobody holds.
                spare = max(plan.efficient, node_friendly(plan.running + unclaimed, gpus_per_node))
                if size > spare:
                    plan.spare_refused = size
                    size = spare
        if (
            plan.running
            and plan.known
            and size != plan.running
            and budget >= plan.running  # a forced shrink is not a choice
            and not worth(plan, size, free=free, gpus_per_node=gpus_per_node, params=params)
        ):
            size = plan.running
        if (
            plan.running
            and size > plan.running
            and not plan.book.measured
            and plan.known
            and plan.running >= params.start_fraction * plan.efficient
        ):
            # Rule goodput.measure: no voluntary grow before a clean epoch at the
            # current size is in (a resize within an epoch measures nothing).
            plan.unmeasured = True
            size = plan.running
        if plan.running == 0 and 0 < size <= unclaimed and plan.known:
            size = start_shape(plan, size, free=free, gpus_per_node=gpus_per_node, params=params)
            plan.placements = free.fill(size)
        elif plan.running == 0 and 0 < size <= unclaimed:
            # A start into free GPUs: on as few nodes as the job's size needs,
            # smaller if the free GPUs are too scattered for that.
            fits = packable(size, free, gpus_per_node=gpus_per_node)
            if 2 * fits >= size:
                # Half the size on one node beats all of it scattered.
                size = fits
                plan.placements = take_packed(size, free.copy())
        floor = math.ceil(params.start_fraction * plan.efficient)
        if (
            plan.running == 0
            and plan.known
            and plan.settled
            and 0 < size < floor
            and plan.book.waited_s < params.admit_patience_s
        ):
            # Rule goodput.admit: a start far below the job's size gains little
            # before the GPUs are reclaimed, and costs a restart: wait instead.
            plan.refused_start = size
            size, plan.placements = 0, {}
        if (
            plan.running == 0
            and plan.known
            and plan.settled
            and size > unclaimed
            and size - unclaimed <= soon
        ):
            # Rule goodput.soon: the GPUs this start would take from running jobs
            # come free within the horizon anyway: wait instead of preempting.
            soon -= size - unclaimed
            deferred += size
            plan.deferred = size
            size, plan.placements = 0, {}
        elif plan.running == 0 and plan.known and plan.settled and size > unclaimed:
            limit = protect_s(
                order[rank + 1 :],
                size - unclaimed,
                waiting=waiting,
                gpus=budget_total,
                params=params,
            )
            if plan.book.waited_s < limit:
                plan.protected_s = limit
                size, plan.placements = 0, {}
        if size < plan.job.min_replicas:
            size, plan.placements = 0, {}
        plan.alloc = size
        for node, count in plan.placements.items():
            free.take(node, count)  # the start's pods, where they were predicted
        if plan.running and size > plan.running:
            land(plan, size - plan.running, free=free)
        budget -= size
        unclaimed = max(unclaimed - max(0, size - plan.running), 0)
    left = budget - params.leftover_reserve - deferred
    share_leftovers(order, left, free=free, gpus_per_node=gpus_per_node, params=params)


def protect_s(
    below: list[JobPlan], need: int, *, waiting: int, gpus: int, params: GoodputParams
) -> float:
    """Rule goodput.protect: how long a start may wait rather than take ``need`` GPUs
    from the lowest-ranked running jobs (the ones the ranked pass shrinks first).

    Each job it takes GPUs from pauses whole for a restart: ``restart_s`` of its
    own time, and its GPUs idle meanwhile, which delays the ``waiting`` jobs by
    their share of the cluster (``running / gpus`` of ``restart_s`` each). The
    wider the victim, the more work the restart loses and the longer the start
    waits for GPUs to free up by themselves (measured: the widest, longest jobs
    were shrunk and regrown 20-45 times each on workloads 1-4).
    """
    loss = 0.0
    for victim in reversed(below):
        if need <= 0:
            break
        if victim.running == 0 or victim.job.paused:
            continue
        need -= victim.running
        loss += params.restart_s * (1 + victim.running * waiting / gpus)
    return loss


def share_leftovers(
    order: list[JobPlan],
    left: int,
    *,
    free: FreeGpus,
    gpus_per_node: int,
    params: GoodputParams,
) -> None:
    """Leftover GPUs, a chunk at a time, to the largest remaining-time drop per GPU."""
    while left > 0:
        best: tuple[float, int, JobPlan] | None = None
        for plan in order:
            if (
                not plan.known
                or plan.running == 0  # a start keeps its packed size this round
                or plan.alloc <= 0
                or plan.alloc >= plan.job.max_replicas
                or (  # rule goodput.measure
                    not plan.book.measured
                    and plan.running >= params.start_fraction * plan.efficient
                )
            ):
                continue
            now_s = shape_s(plan, plan.alloc, free=free, gpus_per_node=gpus_per_node, params=params)
            # Only where measurements say it helps; probing is the ranked pass's job.
            largest = plan.curve.largest if plan.curve is not None else 0
            top = min(plan.job.max_replicas, plan.alloc + left, largest)
            for size in range(plan.alloc + 1, top + 1):
                if size != node_friendly(size, gpus_per_node):
                    continue
                gain = now_s - shape_s(
                    plan, size, free=free, gpus_per_node=gpus_per_node, params=params
                )
                if gain <= 0:
                    continue
                if (
                    plan.running
                    and plan.alloc == plan.running
                    and not worth(plan, size, free=free, gpus_per_node=gpus_per_node, params=params)
                ):
                    continue
                per_gpu = gain / (size - plan.alloc)
                if best is None or per_gpu > best[0]:
                    best = (per_gpu, size, plan)
        if best is None:
            return
        _, size, plan = best
        left -= size - plan.alloc
        land(plan, size - plan.alloc, free=free)
        plan.alloc = size
