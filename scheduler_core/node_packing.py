"""Node-count arithmetic for planners that pack replicas on few nodes.

Free GPUs per node live in a ``FreeGpus``: the nodes grouped by how many GPUs
they have free (a *level*), each level's names kept sorted. Every question
the packers ask ("the fullest node with at least k free", "the node with the
most free", "the k largest free counts") is then a bisect over the few
distinct levels instead of a scan of every node, so a plan's cost grows with
the jobs it starts, not with jobs x nodes. Answers are exactly those of a
scan with the same (free, name) tie-breaks.

Which sizes pack without leaving fragments, the largest size that fits on
the fewest nodes it needs, and which nodes to take (most free first, best
fit for the last) are pure functions over it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping


class FreeGpus:
    """Free GPUs per node name, indexed by level (the free count)."""

    def __init__(self, free: Mapping[str, int]) -> None:
        self._free = dict(free)
        self._names: dict[int, list[str]] = {}
        for name, level in self._free.items():
            self._names.setdefault(level, []).append(name)
        for names in self._names.values():
            names.sort()
        self._levels = sorted(self._names)

    def __getitem__(self, name: str) -> int:
        return self._free[name]

    def as_dict(self) -> dict[str, int]:
        return dict(self._free)

    def total(self) -> int:
        return sum(level * len(names) for level, names in self._names.items())

    def take(self, name: str, count: int) -> None:
        """``count`` GPUs of node ``name`` are taken."""
        level = self._free[name]
        self._move(name, level, new_level=level - count)

    def _move(self, name: str, level: int, *, new_level: int) -> None:
        if new_level == level:
            return
        names = self._names[level]
        del names[bisect_left(names, name)]
        if not names:
            del self._names[level]
            del self._levels[bisect_left(self._levels, level)]
        target = self._names.get(new_level)
        if target is None:
            self._names[new_level] = [name]
            insort(self._levels, new_level)
        else:
            insort(target, name)
        self._free[name] = new_level

    def fullest_with(self, at_least: int) -> str | None:
        """The node with the fewest free GPUs among those with ``at_least`` (>= 1) free,
        ties by name: min over (free, name)."""
        index = bisect_left(self._levels, max(at_least, 1))
        if index == len(self._levels):
            return None
        return self._names[self._levels[index]][0]

    def most_free(self) -> str | None:
        """The node with the most free GPUs (at least one), ties by name: min over (-free, name)."""
        if not self._levels or self._levels[-1] <= 0:
            return None
        return self._names[self._levels[-1]][0]

    def largest_sum(self, count: int) -> int:
        """The sum of the ``count`` largest free counts (zeros and negatives included)."""
        total = 0
        for level in reversed(self._levels):
            if count <= 0:
                break
            taken = min(count, len(self._names[level]))
            total += taken * level
            count -= taken
        return total

    def fill(self, size: int) -> dict[str, int]:
        """Where ``most_allocated(size)`` would put the pods, without taking anything.

        Each pod goes to the fullest node with a free GPU, and a node that took
        one is then the fullest, so nodes are filled one after another in
        (free, name) order.
        """
        placements: dict[str, int] = {}
        for level in self._levels:
            if level <= 0:
                continue
            for name in self._names[level]:
                if size <= 0:
                    return placements
                placements[name] = min(level, size)
                size -= level
        return placements

    def fill_nodes(self, size: int) -> int:
        """How many nodes ``most_allocated(size)`` would use, without taking anything."""
        return len(self.fill(size))

    def copy(self) -> FreeGpus:
        return FreeGpus(self._free)


def packable(size: int, free: FreeGpus, *, gpus_per_node: int) -> int:
    """The largest count <= ``size`` that fits on the fewest nodes it needs."""
    for count in range(size, 0, -1):
        nodes = -(-count // max(gpus_per_node, 1))
        if free.largest_sum(nodes) >= count:
            return count
    return 0


def take_packed(size: int, free: FreeGpus) -> dict[str, int]:
    """Nodes for ``size`` replicas: most free first, the last one best fit."""
    placements: dict[str, int] = {}
    left = size
    while left > 0:
        name = free.fullest_with(left)
        if name is None:
            name = free.most_free()
        if name is None:
            raise ValueError(f"no free GPU left for {left} replica(s)")
        take = min(left, free[name])
        free.take(name, take)
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


def most_allocated(size: int, free: FreeGpus) -> dict[str, int]:
    """Where kube-scheduler puts ``size`` new one-GPU pods (``free`` is updated).

    The shipped scheduler config scores ``MostAllocated``: each pod goes to the
    fullest node that still has a free GPU (ties: by name). This is the
    placement the policy predicts before choosing a size.
    """
    placements = free.fill(size)
    for name, count in placements.items():
        free.take(name, count)
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
