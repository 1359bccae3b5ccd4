"""Best-fit node choice for the ``edl`` planner's dry run: free room per node.

Best fit = the fitting node with the smallest (free GPUs, idle CPU, free
memory, name) (fix: EDL took the first fitting node in Go map order; this
keeps GPU nodes for GPU jobs and never depends on input order).

Real clusters have few node shapes, so many nodes have identical free room.
Such nodes are interchangeable except for the name tie-break, so they form
one *class*: a room (free GPUs, idle CPU, free memory) with a heap of the
names that have it. Best fit is then the smallest fitting room, and within
its class the smallest name; a claim moves one name from one class to
another.

A room is packed into one integer, ``gpu x gpu_stride + cpu x memory_span +
memory`` (each measured from its lowest value), which sorts exactly like the
triple: every part stays within its span, because a claim only takes room a
node has and requests are never negative. All rooms live in one sorted list,
so a claim is one bisect to the first room with enough GPUs and CPU, a short
scan past rooms short of memory (another bisect when the scan reaches the
next GPU level), and one list update; and since packing is linear, taking a
replica's resources is one subtraction.

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
        cpu = [room.nodes_cpu_idle_milli[name] for name in names]
        memory = [room.nodes_memory_free_mega.get(name, 0) for name in names]
        gpu = [room.nodes_gpu_free.get(name, 0) for name in names]
        # Overcommitted nodes may report negative room; measure from the lowest.
        self._cpu_low = min([0, *cpu])
        self._memory_low = min([0, *memory])
        self._gpu_low = min([0, *gpu])
        self._memory_span = max([0, *memory]) - self._memory_low + 1
        self._gpu_stride = (max([0, *cpu]) - self._cpu_low + 1) * self._memory_span
        # packed room -> heap of the names of the nodes with that room
        self._classes: dict[int, list[str]] = {}
        packed = [self._pack(c, m, gpu=g) for c, m, g in zip(cpu, memory, gpu, strict=True)]
        for name, room_key in zip(names, packed, strict=True):
            self._classes.setdefault(room_key, []).append(name)
        for members in self._classes.values():
            members.sort()  # a sorted list is a heap
        self._rooms = sorted(self._classes)
        # (cpu, memory, gpu) shapes that found no node: room only shrinks, so never will.
        self._unplaceable: set[tuple[int, int, int]] = set()

    def _pack(self, cpu: int, memory: int, *, gpu: int) -> int:
        return (
            (gpu - self._gpu_low) * self._gpu_stride
            + (cpu - self._cpu_low) * self._memory_span
            + memory
            - self._memory_low
        )

    def claim(self, cpu: int, mem: int, *, gpu: int) -> str | None:
        """Take room for one replica on the best-fit node; None when no node fits."""
        unplaceable = self._unplaceable
        if unplaceable and (cpu, mem, gpu) in unplaceable:
            return None
        span, stride, rooms = self._memory_span, self._gpu_stride, self._rooms
        cpu_part = (cpu - self._cpu_low) * span
        least_memory = mem - self._memory_low
        level_start = (gpu - self._gpu_low) * stride
        level_end = level_start + stride
        # The first room with enough GPUs and CPU; from there on, rooms of this
        # GPU level all have enough CPU and only memory can fall short.
        index = bisect_left(rooms, level_start + cpu_part)
        count = len(rooms)
        while index < count:
            packed = rooms[index]
            if packed >= level_end:
                # Past this GPU level: skip to the next level's first room with enough CPU.
                level_start = packed - packed % stride
                level_end = level_start + stride
                index = bisect_left(rooms, level_start + cpu_part, index)
            elif packed % span >= least_memory:
                break
            else:
                index += 1
        else:
            unplaceable.add((cpu, mem, gpu))
            return None
        # Move the smallest name of the best class to the class it shrinks into.
        # Packing is linear: taking the replica's room is one subtraction.
        left = packed - gpu * stride - cpu * span - mem
        classes = self._classes
        members = classes[packed]
        if left == packed:  # a replica that requests nothing takes no room
            return members[0]
        target = classes.get(left)
        if len(members) > 1:
            name = heappop(members)
            if target is None:
                classes[left] = [name]
                insort(rooms, left, 0, index)
            else:
                heappush(target, name)
            return name
        # A node alone in its class carries its list along.
        name = members[0]
        del classes[packed]
        if target is not None:
            del rooms[index]
            heappush(target, name)
            return name
        classes[left] = members
        position = bisect_left(rooms, left, 0, index)
        if position == index:
            rooms[index] = left  # nothing lies between: the room just shrinks in place
        else:
            del rooms[index]
            rooms.insert(position, left)
        return name
