"""Placement shape: where a job's pods land, and what that costs its remaining time.

Rules ``goodput.spread`` and ``goodput.shape``, and the hold rule that every
voluntary resize passes.

* **Placement shape.** The cluster places pods one by one on the fullest
  node with a free GPU (kube-scheduler ``MostAllocated``,
  deploy/kube-scheduler-config.yaml), so a start of n pods lands where
  ``node_packing.most_allocated`` predicts. Clean epochs on more nodes than
  the replicas need are not thrown away: each gives the application's
  slowdown for that (replicas, nodes) shape against its packed curve (yolov3
  4 GPUs on 2 nodes: 1.75x in the traces; some 8-GPU 3-node shapes are
  faster than packed). A start picks (``start_shape``), among 1..its size
  (any count, not a 1-2-4-8 ladder), the size whose predicted placement
  finishes first: packed curve x the measured slowdown for that shape (else
  the application's mean slowdown, else ``1 + spread_prior`` per extra node).
* **Resizes where they land.** ``ElasticJob.placement`` carries the job's
  pods per node (the runtime reads them from the pods' ``nodeName``). A
  grow's pods are predicted by ``most_allocated`` on the free GPUs
  (``land``), a shrink by ``replicaset_shrink`` (the ReplicaSet removes pods
  from the job's fullest nodes first); ``shape_s`` is the remaining time x
  the spread slowdown of the resulting shape, so a grow that spreads a job
  slower than it is now (yolov3 2 -> 2+2) is not made.
* **Hold rule** (``worth``). A running job keeps its size unless the change
  is forced (GPUs go to higher-ranked jobs) or the predicted saving beats
  ``hold_factor`` x ``restart_s`` and ``hold_fraction`` of its remaining time.
"""

from __future__ import annotations

import math

from scheduler_core.goodput_books import spread_factor
from scheduler_core.node_packing import FreeGpus, most_allocated, replicaset_shrink
from scheduler_core.policies.goodput.params import GoodputParams
from scheduler_core.policies.goodput.plan import JobPlan


def held_pods(plan: JobPlan) -> dict[str, int]:
    """The job's pods by node: where they run now plus the grows predicted this round."""
    held = dict(plan.job.placement)
    for node, count in plan.landed.items():
        held[node] = held.get(node, 0) + count
    return held


def nodes_at(plan: JobPlan, size: int, *, free: FreeGpus) -> int:
    """Nodes the job would run on at ``size`` (0 when its placement is not known).

    A grow's pods land where MostAllocated puts them (``most_allocated`` on
    the free GPUs); a shrink leaves what the ReplicaSet controller leaves
    (``replicaset_shrink``: pods on the job's fullest nodes go first).
    """
    held = held_pods(plan)
    have = sum(held.values())
    if not held or have != plan.running + sum(plan.landed.values()):
        return 0
    if size > have:
        return len(set(held) | set(free.fill(size - have)))
    if size < have:
        return len(replicaset_shrink(held, have - size))
    return len(held)


def shape_s(
    plan: JobPlan, size: int, *, free: FreeGpus, gpus_per_node: int, params: GoodputParams
) -> float:
    """Rule goodput.shape for a running job: remaining time at ``size`` on the nodes it
    would land on (packed curve x the spread slowdown, rule goodput.spread)."""
    seconds = plan.remaining_s(size)
    nodes = nodes_at(plan, size, free=free) if plan.running else 0
    if nodes == 0 or math.isinf(seconds):
        return seconds
    return seconds * spread_factor(
        plan.spread, size, nodes=nodes, gpus_per_node=gpus_per_node, prior=params.spread_prior
    )


def worth(
    plan: JobPlan, size: int, *, free: FreeGpus, gpus_per_node: int, params: GoodputParams
) -> bool:
    """Hold rule: resizing a running job must save more than a restart, with margin,
    counting where the added pods land (a grow that spreads the job can be slower)."""
    if plan.running == 0 or size == plan.running:
        return True
    before = shape_s(plan, plan.running, free=free, gpus_per_node=gpus_per_node, params=params)
    after = shape_s(plan, size, free=free, gpus_per_node=gpus_per_node, params=params)
    saving = before - after
    return saving > max(params.hold_factor * params.restart_s, params.hold_fraction * before)


def land(plan: JobPlan, add: int, *, free: FreeGpus) -> None:
    """Take a grow's predicted pods out of ``free`` (later predictions see them gone)."""
    if add <= 0 or not plan.job.placement:
        return
    for node, count in most_allocated(add, free).items():
        plan.landed[node] = plan.landed.get(node, 0) + count


def start_shape(
    plan: JobPlan, size: int, *, free: FreeGpus, gpus_per_node: int, params: GoodputParams
) -> int:
    """Rule goodput.shape: the start size whose predicted placement finishes first.

    Kubernetes places each pod on the fullest node with room (MostAllocated),
    so a start of n pods lands where ``most_allocated`` says; its time is the
    packed curve at n times the slowdown learned for that many nodes. Ties go
    to the smaller size (fewer GPUs for the same time).
    """
    best_size, best_s = size, math.inf
    for candidate in range(max(plan.job.min_replicas, 1), size + 1):
        nodes = free.fill_nodes(candidate)
        factor = spread_factor(
            plan.spread,
            candidate,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            prior=params.spread_prior,
        )
        seconds = plan.remaining_s(candidate) * factor
        if seconds < best_s * (1 - 1e-9):
            best_size, best_s = candidate, seconds
            plan.shape_nodes, plan.shape_factor = nodes, factor
    return best_size
