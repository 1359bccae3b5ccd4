"""Node-count arithmetic for planners that pack replicas on few nodes.

Pure functions over "free GPUs per node" maps: which sizes pack without
leaving fragments, the largest size that fits on the fewest nodes it needs,
and which nodes to take (most free first, best fit for the last).
"""

from __future__ import annotations


def packable(size: int, free: dict[str, int], gpus_per_node: int) -> int:
    """The largest count <= ``size`` that fits on the fewest nodes it needs."""
    levels = sorted(free.values(), reverse=True)
    for count in range(size, 0, -1):
        nodes = -(-count // max(gpus_per_node, 1))
        if sum(levels[:nodes]) >= count:
            return count
    return 0


def take_packed(size: int, free: dict[str, int]) -> dict[str, int]:
    """Nodes for ``size`` replicas: most free first, the last one best fit."""
    placements: dict[str, int] = {}
    left = size
    while left > 0:
        fits = [n for n, f in free.items() if f >= left]
        if fits:
            name = min(fits, key=lambda n: (free[n], n))
        else:
            name = min((n for n, f in free.items() if f > 0), key=lambda n: (-free[n], n))
        take = min(left, free[name])
        free[name] -= take
        placements[name] = placements.get(name, 0) + take
        left -= take
    return placements


def node_friendly(size: int, gpus_per_node: int) -> int:
    """The largest size <= ``size`` that packs without leaving node fragments:
    a power of two up to a node, whole nodes beyond."""
    if size <= 0:
        return 0
    if size >= gpus_per_node:
        return size - size % gpus_per_node
    power = 1
    while power * 2 <= size:
        power *= 2
    return power


def most_allocated(size: int, free: dict[str, int]) -> dict[str, int]:
    """Where kube-scheduler puts ``size`` new one-GPU pods (``free`` is updated).

    The shipped scheduler config scores ``MostAllocated``: each pod goes to the
    fullest node that still has a free GPU (ties: by name). This is the
    placement the policy predicts before choosing a size.
    """
    placements: dict[str, int] = {}
    for _ in range(size):
        open_nodes = [n for n, f in free.items() if f > 0]
        if not open_nodes:
            break
        name = min(open_nodes, key=lambda n: (free[n], n))
        free[name] -= 1
        placements[name] = placements.get(name, 0) + 1
    return placements


def replicaset_shrink(placement: dict[str, int], remove: int) -> dict[str, int]:
    """What a ReplicaSet scale-down by ``remove`` leaves of ``placement``.

    Upstream ``getPodsToDelete`` ranks each pod once by how many of the job's
    pods share its node and deletes the highest rank first (pods of equal
    rank: here the last node by name, where upstream compares ready times and
    then picks at random). This is the prediction the policy makes before
    choosing a size; pod-deletion-cost is not set, so it does not apply.
    """
    pods = sorted(
        (node for node, count in placement.items() for _ in range(count)),
        key=lambda node: (placement[node], node),
        reverse=True,
    )
    left = dict(placement)
    for node in pods[: max(0, remove)]:
        left[node] -= 1
    return {node: count for node, count in left.items() if count > 0}
