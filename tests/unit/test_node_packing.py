"""``FreeGpus`` and the packers answer exactly what a scan of every node answers.

The oracle is the scan itself (the packers as they were before the level
index): ``min`` over (free, name) or (-free, name) of every node, and the
sorted free counts.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.node_packing import FreeGpus, most_allocated, packable, take_packed


def scan_packable(size: int, free: dict[str, int], gpus_per_node: int) -> int:
    levels = sorted(free.values(), reverse=True)
    for count in range(size, 0, -1):
        nodes = -(-count // max(gpus_per_node, 1))
        if sum(levels[:nodes]) >= count:
            return count
    return 0


def scan_take_packed(size: int, free: dict[str, int]) -> dict[str, int]:
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


def scan_most_allocated(size: int, free: dict[str, int]) -> dict[str, int]:
    placements: dict[str, int] = {}
    for _ in range(size):
        open_nodes = [n for n, f in free.items() if f > 0]
        if not open_nodes:
            break
        name = min(open_nodes, key=lambda n: (free[n], n))
        free[name] -= 1
        placements[name] = placements.get(name, 0) + 1
    return placements


frees = st.dictionaries(
    st.text(alphabet="abcdef", min_size=1, max_size=3), st.integers(-2, 8), max_size=12
)
steps = st.lists(
    st.tuples(st.sampled_from(["packed", "allocated", "count"]), st.integers(0, 20)), max_size=12
)


@settings(max_examples=300, deadline=None)
@given(free=frees, steps=steps, gpus_per_node=st.integers(1, 8))
def test_packers_match_a_scan_over_every_node(
    free: dict[str, int], steps: list[tuple[str, int]], gpus_per_node: int
) -> None:
    room = FreeGpus(free)
    scanned = dict(free)
    for action, size in steps:
        assert room.total() == sum(scanned.values())
        fits = scan_packable(size, scanned, gpus_per_node)
        assert packable(size, room, gpus_per_node=gpus_per_node) == fits
        if action == "packed":
            assert take_packed(fits, room) == scan_take_packed(fits, scanned)
        elif action == "allocated":
            assert most_allocated(size, room) == scan_most_allocated(size, scanned)
        else:
            assert room.fill_nodes(size) == len(scan_most_allocated(size, dict(scanned)))
        assert room.as_dict() == scanned
