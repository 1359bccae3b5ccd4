"""Where replicas go: GPU bookkeeping per node and the placement rules.

Two models; a job's existing replicas stay where they are in both:

* ``kube`` (the default): what a Kubernetes cluster set up as
  ``deploy/kube-scheduler-config.yaml`` does. Each added replica is one pod,
  scheduled on its own by ``NodeResourcesFit`` scoring ``MostAllocated``
  (GPUs weigh most): the node with the fewest free GPUs that still has one,
  ties to the lowest node index (kube-scheduler breaks ties at random). It
  knows nothing of the job: no hints, no keeping a job together beyond what
  packing gives. A scale-down is the ReplicaSet controller's
  (``shrink_replicaset``): pods on the nodes holding most of the job's pods
  go first, then the newest.
* ``ideal``: the simulator's private best packing (added replicas first to
  nodes the job already uses, then to the nodes a policy hinted when the hint
  fits, else onto the fewest nodes that fit; removed replicas leave the
  job's least-used nodes first). Kept for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping


class GpuNodes:
    """Free GPUs per node of a homogeneous cluster, by node index."""

    def __init__(self, nodes: int, gpus_per_node: int) -> None:
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError("a cluster needs at least one node with at least one GPU")
        self.gpus_per_node = gpus_per_node
        self.free = [gpus_per_node] * nodes

    @property
    def total(self) -> int:
        return self.gpus_per_node * len(self.free)

    @property
    def free_total(self) -> int:
        return sum(self.free)

    def release(self, placement: Mapping[int, int]) -> None:
        for node, count in placement.items():
            self.free[node] += count
            if self.free[node] > self.gpus_per_node:
                raise RuntimeError(f"node {node} released more GPUs than it has")


def node_name(index: int) -> str:
    return f"node-{index:02d}"


def node_index(name: str) -> int | None:
    prefix = "node-"
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        return None
    return int(name[len(prefix) :])


def shrink(placement: dict[int, int], remove: int, *, nodes: GpuNodes) -> dict[int, int]:
    """Take ``remove`` replicas off, from the job's least-used nodes first."""
    result = dict(placement)
    for node in sorted(result, key=lambda n: (result[n], -n)):
        if remove <= 0:
            break
        take = min(remove, result[node])
        result[node] -= take
        nodes.free[node] += take
        remove -= take
        if result[node] == 0:
            del result[node]
    return result


def grow(
    placement: dict[int, int],
    add: int,
    *,
    nodes: GpuNodes,
    hint: Mapping[str, int] | None = None,
) -> dict[int, int]:
    """Add up to ``add`` replicas (fewer when the cluster is full)."""
    result = dict(placement)
    # Keep the job together: first fill the nodes it already uses.
    for node in sorted(result, key=lambda n: (-nodes.free[n], n)):
        add = _take(result, node, want=add, nodes=nodes)
    if add > 0 and hint and _hint_fits(hint, add, nodes=nodes):
        for name, count in sorted(hint.items()):
            index = node_index(name)
            if index is not None and count > 0:
                add -= count - _take(result, index, want=count, nodes=nodes)
    if add > 0:
        for node in _fewest_nodes(add, nodes):
            add = _take(result, node, want=add, nodes=nodes)
    return result


def _take(placement: dict[int, int], node: int, *, want: int, nodes: GpuNodes) -> int:
    take = min(want, nodes.free[node])
    if take > 0:
        nodes.free[node] -= take
        placement[node] = placement.get(node, 0) + take
    return want - take


def _hint_fits(hint: Mapping[str, int], add: int, *, nodes: GpuNodes) -> bool:
    if sum(hint.values()) != add:
        return False
    for name, count in hint.items():
        index = node_index(name)
        if index is None or index >= len(nodes.free) or count < 0 or nodes.free[index] < count:
            return False
    return True


def _fewest_nodes(add: int, nodes: GpuNodes) -> list[int]:
    """Nodes to use for ``add`` replicas: fullest-free first, best fit for the rest."""
    order = sorted(
        (n for n, f in enumerate(nodes.free) if f > 0), key=lambda n: (-nodes.free[n], n)
    )
    chosen: list[int] = []
    remaining = add
    for position, node in enumerate(order):
        if remaining <= 0:
            break
        if nodes.free[node] >= remaining:
            # The last node: the one with the least free room that still fits the rest.
            fits = [n for n in order[position:] if nodes.free[n] >= remaining]
            chosen.append(min(fits, key=lambda n: (nodes.free[n], n)))
            remaining = 0
            break
        chosen.append(node)
        remaining -= nodes.free[node]
    return chosen


def grow_most_allocated(placement: dict[int, int], add: int, *, nodes: GpuNodes) -> dict[int, int]:
    """kube-scheduler, MostAllocated: each pod onto the fullest node that has a free GPU."""
    result = dict(placement)
    for _ in range(add):
        candidates = [n for n, free in enumerate(nodes.free) if free > 0]
        if not candidates:
            break
        _take(result, min(candidates, key=lambda n: (nodes.free[n], n)), want=1, nodes=nodes)
    return result


def shrink_replicaset(
    placement: dict[int, int],
    remove: int,
    *,
    nodes: GpuNodes,
    started: dict[int, list[float]] | None = None,
    now: float = 0.0,
) -> dict[int, int]:
    """ReplicaSet scale-down, upstream's ``getPodsToDelete`` order for ready pods.

    Each pod is ranked once by how many of the job's pods share its node; the
    higher rank goes first; among equal ranks the pod running for less time
    goes first, compared in ``floor(log2(age in ns))`` buckets. Where upstream
    is arbitrary (same bucket: random UIDs; same time: an unstable sort), the
    pod on the highest node index goes first, then the newest; the loopback
    API server's ReplicaSet controller decides the same way
    (``trainscaler_sim/apiserver/controllers/pod_ranking.py``). ``started`` (node -> the
    start times of the job's pods there) is updated in place; pods without a
    known start count as started at 0.
    """
    times = started if started is not None else {}
    pods = []
    for node, count in placement.items():
        known = sorted(times.get(node, []))
        known = [0.0] * (count - len(known)) + known[-count:] if count else []
        pods += [(node, at, count) for at in known]

    def order(pod: tuple[int, float, int]) -> tuple[int, int, int, float]:
        node, at, rank = pod
        return (-rank, _age_bucket(now - at), -node, -at)

    result = dict(placement)
    for node, at, _ in sorted(pods, key=order)[: max(0, remove)]:
        result[node] -= 1
        nodes.free[node] += 1
        if result[node] == 0:
            del result[node]
        if at in times.get(node, []):
            times[node].remove(at)
    for node in list(times):
        if node not in result:
            del times[node]
    return result


def _age_bucket(age_s: float) -> int:
    nanoseconds = age_s * 1e9
    return int(math.log2(nanoseconds)) if nanoseconds > 0 else -1
