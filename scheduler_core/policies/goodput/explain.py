"""Explaining: each job's decision, with the rule that made it and its numbers.

``decide_job`` turns a finished ``JobPlan`` into a ``ScalingDecision`` and
the job's updated book. The rule named is the one that decided the target:
``goodput.paused``, ``goodput.unknown`` (no estimate), ``goodput.admit``,
``goodput.soon`` and ``goodput.protect`` (a start that waits, and why),
``goodput.measure`` (a grow held until a clean epoch), ``goodput.spare`` (a
running job's probe cut to the GPUs nobody holds), ``goodput.keep`` /
``goodput.wait``, ``goodput.start`` (with ``goodput.shape``'s predicted
nodes and slowdown), ``goodput.preempt``, ``goodput.grow`` and
``goodput.shrink``; a grow or start sized by ``goodput.queue`` says the GPU
price it was sized at, and whether the size is a probe (``goodput.reach``)
or a count interpolated between measured ones (``goodput.between``). Every
number the decision used goes in ``numbers``.
"""

from __future__ import annotations

import math

from scheduler_core.goodput_books import GoodputJob
from scheduler_core.models import Reason, ScalingDecision
from scheduler_core.policies.goodput.params import GoodputParams
from scheduler_core.policies.goodput.plan import JobPlan


def decide_job(
    plan: JobPlan, params: GoodputParams, *, now: float
) -> tuple[ScalingDecision, GoodputJob]:
    job, target = plan.job, plan.alloc
    remaining_now = plan.remaining_s(target) if target > 0 else plan.remaining_s(plan.efficient)
    numbers: dict[str, float | int | str | None] = {
        "rank": plan.rank,
        "rank_s": rounded(plan.rank_s),
        "order_s": rounded(plan.order_s),
        "estimated_remaining_s": rounded(remaining_now),
        "efficient_size": plan.efficient,
        "efficiency_threshold": params.efficiency_threshold,
        "efficiency_at_target": (
            rounded(plan.curve.efficiency(target))
            if plan.curve is not None and target > 0
            else None
        ),
        "waited_s": rounded(plan.book.waited_s),
        "probe": int(plan.probe),
        # Rule goodput.queue: the price of a GPU its efficient size was chosen at.
        "gpu_weight": None if plan.gpu_weight is None else rounded(plan.gpu_weight),
    }
    if plan.spare_refused:
        numbers["spare_refused"] = plan.spare_refused
    if plan.probe and plan.curve is not None:
        # Rule goodput.probe: what the probe (its size, within the job's bounds) is
        # predicted to gain over the top measured count.
        numbers["probe_speedup"] = rounded(
            plan.curve.unit_time(plan.curve.largest) / plan.curve.unit_time(plan.want)
        )
    if job.paused:
        rule, message = "goodput.paused", "paused: untouched"
    elif not plan.known:
        rule = "goodput.unknown"
        message = f"no estimate yet: {target} replicas into free GPUs (rank {plan.rank})"
    elif target == 0 and plan.running == 0 and plan.refused_start:
        rule = "goodput.admit"
        message = (
            f"rank {plan.rank}: waits; {plan.refused_start} GPUs < start_fraction "
            f"{params.start_fraction} x efficient size {plan.efficient}"
        )
    elif target == 0 and plan.running == 0 and plan.deferred:
        rule = "goodput.soon"
        message = (
            f"rank {plan.rank}: waits a round for {plan.deferred} GPUs that jobs"
            " finishing before the next round free, instead of preempting"
        )
    elif target == 0 and plan.running == 0 and plan.protected_s:
        rule = "goodput.protect"
        message = (
            f"rank {plan.rank}: waits ({plan.book.waited_s:.0f}s of {plan.protected_s:.0f}s)"
            " rather than restart the running jobs its GPUs would come from"
        )
        numbers["protect_s"] = rounded(plan.protected_s)
    elif target == plan.running and target and plan.unmeasured:
        rule = "goodput.measure"
        message = (
            f"rank {plan.rank}: keeps {target} until a clean epoch at this size is"
            " reported (no voluntary grow before that)"
        )
    elif target == plan.running and target and plan.spare_refused:
        rule = "goodput.spare"
        message = (
            f"rank {plan.rank}: keeps {target}; its probe to {plan.spare_refused} would"
            " take GPUs from running jobs"
        )
    elif target == plan.running:
        rule = "goodput.keep" if target else "goodput.wait"
        message = f"rank {plan.rank}: {'keeps' if target else 'waits at'} {target}"
    elif plan.running == 0:
        rule = "goodput.start"
        message = f"rank {plan.rank}: starts with {target} (efficient size {plan.efficient})"
        if plan.shape_nodes:
            # Rule goodput.shape chose the size from the predicted placement.
            message += (
                f"; goodput.shape: predicted on {plan.shape_nodes} nodes,"
                f" slowdown {plan.shape_factor:.2f}"
            )
            numbers["predicted_nodes"] = plan.shape_nodes
            numbers["spread_factor"] = rounded(plan.shape_factor)
    elif target == 0:
        rule = "goodput.preempt"
        message = f"rank {plan.rank}: preempted for shorter jobs"
    elif target > plan.running:
        rule = "goodput.grow"
        message = f"rank {plan.rank}: grows {plan.running} -> {target}, saving beats the restart"
    else:
        rule = "goodput.shrink"
        message = f"rank {plan.rank}: shrinks {plan.running} -> {target}, GPUs go to shorter jobs"
    if plan.spare_refused and target > plan.running:
        message += (
            f"; goodput.spare: its probe to {plan.spare_refused} cut to the GPUs nobody holds"
        )
    if plan.gpu_weight is not None and target > plan.running:
        message += (
            f"; goodput.queue: size {plan.efficient} at {plan.gpu_weight:.2f}"
            " jobs per GPU competing"
        )
        if plan.probe and plan.curve is not None:
            message += (
                f"; goodput.reach: probes {plan.want} ({params.probe_factor:g} x the"
                f" largest measured count {plan.curve.largest})"
            )
        elif plan.curve is not None and plan.efficient not in plan.curve.replicas:
            message += (
                f"; goodput.between: {plan.efficient} interpolated between measured"
                f" counts {', '.join(map(str, plan.curve.replicas))}"
            )
    if plan.known and target > 0:
        message += f"; estimated remaining {remaining_now:.0f}s"
    decision = ScalingDecision(
        job=job.key,
        current=job.current_replicas,
        target=target,
        reason=Reason(rule=rule, message=message, numbers=numbers),
        placements=plan.placements if target == plan.alloc and plan.running == 0 else {},
    )
    book = plan.book
    if target != plan.running:
        book = book.model_copy(update={"last_change": now, "size": target, "measured": False})
    return decision, book


def rounded(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else round(value, 3)
