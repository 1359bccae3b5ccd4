"""Best-fit node choice for the ``edl`` planner's dry run: free room per node.

Best fit = the fitting node with the smallest (free GPUs, idle CPU, free
memory, name) (fix: EDL took the first fitting node in Go map order; this
keeps GPU nodes for GPU jobs and never depends on input order).

Real clusters have few node shapes, so many nodes have identical free room.
Such nodes are interchangeable except for the name tie-break, so they form
one *class*: a room (free GPUs, idle CPU, free memory) with a heap of the
names that have it. Best fit is then the smallest fitting room, and within
its class the smallest name; a claim moves one name from one class to
another. Rooms are grouped by free GPUs and, within a group, kept sorted by
(CPU, memory), so a claim bisects to the first room with enough CPU and only
scans the few distinct rooms short of memory.

A room's (CPU, memory) is packed into one integer, ``cpu x span + memory -
low``, which sorts exactly like the pair (memory stays in ``[low, low +
span)``: a claim only takes memory a node has, and requests are never
negative) and compares much faster in the sorted lists.

EDL dry run: room is only ever taken, never given back (a shrink frees no
node room, since which pod goes is not known), so a replica shape that once
found no node never will in the same plan, and is answered from memory.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush

from scheduler_core.models import ClusterResource


class NodeIndex:
    """Free room per node, answering best-fit claims without scanning every node."""

    def __init__(self, cluster: ClusterResource) -> None:
        room = cluster.nodes
        names = list(room.nodes_cpu_idle_milli)
        memory = [room.nodes_memory_free_mega.get(name, 0) for name in names]
        # Room only shrinks and never below zero memory, so memory stays in [low, high].
        self._low = min([0, *memory])
        self._span = max([0, *memory]) - self._low + 1
        # free GPUs -> packed room -> heap of the names of the nodes with that room
        self._classes: dict[int, dict[int, list[str]]] = {}
        for name, mem in zip(names, memory, strict=True):
            gpu = room.nodes_gpu_free.get(name, 0)
            packed = self._pack(room.nodes_cpu_idle_milli[name], mem)
            self._classes.setdefault(gpu, {}).setdefault(packed, []).append(name)
        for rooms in self._classes.values():
            for members in rooms.values():
                members.sort()  # a sorted list is a heap
        # free GPUs -> that group's packed rooms, sorted
        self._rooms = {gpu: sorted(rooms) for gpu, rooms in self._classes.items()}
        self._gpu_levels = sorted(self._classes)
        # (cpu, memory, gpu) shapes that found no node: room only shrinks, so never will.
        self._unplaceable: set[tuple[int, int, int]] = set()

    def _pack(self, cpu: int, mem: int) -> int:
        return cpu * self._span + mem - self._low

    def claim(self, cpu: int, mem: int, gpu: int) -> str | None:
        """Take room for one replica on the best-fit node; None when no node fits."""
        unplaceable = self._unplaceable
        if unplaceable and (cpu, mem, gpu) in unplaceable:
            return None
        span, low, levels = self._span, self._low, self._gpu_levels
        least_cpu = cpu * span  # the smallest packed room with enough CPU
        for position in range(bisect_left(levels, gpu), len(levels)):
            level = levels[position]
            rooms = self._rooms[level]
            for index in range(bisect_left(rooms, least_cpu), len(rooms)):
                packed = rooms[index]
                if packed % span + low >= mem:
                    break
            else:
                continue
            # Move the smallest name of the best class to the class it shrinks into.
            classes = self._classes[level]
            members = classes[packed]
            if len(members) > 1:
                name = heappop(members)
                members = [name]
            else:  # a node alone in its class carries its list along
                name = members[0]
                del classes[packed], rooms[index]
                if not classes:
                    del self._classes[level], self._rooms[level], levels[position]
            # Packing is linear: taking (cpu, memory) subtracts cpu x span + memory.
            left = packed - least_cpu - mem
            level -= gpu
            shrunk_into = self._classes.get(level)
            if shrunk_into is None:
                shrunk_into = self._classes[level] = {}
                self._rooms[level] = []
                insort(levels, level)
            target = shrunk_into.get(left)
            if target is None:
                shrunk_into[left] = members
                insort(self._rooms[level], left)
            else:
                heappush(target, name)
            return name
        unplaceable.add((cpu, mem, gpu))
        return None
