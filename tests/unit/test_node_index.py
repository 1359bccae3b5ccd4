"""``NodeIndex``: every claim is the brute-force best fit, room is taken exactly once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.models import ClusterResource, NodeResources
from scheduler_core.node_index import NodeIndex

Room = tuple[int, int, int]  # (idle cpu milli, free memory mega, free gpus)


def index_of(nodes: dict[str, Room]) -> NodeIndex:
    return NodeIndex(
        ClusterResource(
            node_count=len(nodes),
            nodes=NodeResources(
                nodes_cpu_idle_milli={name: room[0] for name, room in nodes.items()},
                nodes_memory_free_mega={name: room[1] for name, room in nodes.items()},
                nodes_gpu_free={name: room[2] for name, room in nodes.items()},
            ),
        )
    )


def brute_force_claim(free: dict[str, Room], cpu: int, mem: int, gpu: int) -> str | None:
    """The rule itself: the fitting node with the smallest (gpus, cpu, memory, name)."""
    fitting = [
        (room[2], room[0], room[1], name)
        for name, room in free.items()
        if room[0] >= cpu and room[1] >= mem and room[2] >= gpu
    ]
    if not fitting:
        return None
    name = min(fitting)[3]
    room = free[name]
    free[name] = (room[0] - cpu, room[1] - mem, room[2] - gpu)
    return name


@pytest.mark.parametrize(
    ("nodes", "request_", "expected"),
    [
        # GPUs first: a CPU replica keeps off the node with free GPUs.
        ({"gpu": (8000, 8000, 4), "cpu": (9000, 9000, 0)}, (1000, 1000, 0), "cpu"),
        # Then the least idle CPU that fits.
        ({"a": (4000, 8000, 0), "b": (2000, 8000, 0)}, (1000, 1000, 0), "b"),
        # Then the least free memory that fits.
        ({"a": (2000, 8000, 0), "b": (2000, 3000, 0)}, (1000, 1000, 0), "b"),
        # Then the name.
        ({"b": (2000, 3000, 0), "a": (2000, 3000, 0)}, (1000, 1000, 0), "a"),
        # Too little memory on the tightest CPU: the next CPU level.
        ({"a": (2000, 500, 0), "b": (3000, 5000, 0)}, (1000, 1000, 0), "b"),
        # No GPU level with enough CPU and memory: none.
        ({"a": (8000, 8000, 1), "b": (500, 8000, 4)}, (1000, 1000, 2), None),
        # An overcommitted node (negative room) is never chosen.
        ({"over": (-500, -100, 0), "ok": (1000, 1000, 0)}, (0, 0, 0), "ok"),
    ],
)
def test_best_fit_rule(nodes: dict[str, Room], request_: Room, expected: str | None) -> None:
    cpu, mem, gpu = request_
    assert index_of(nodes).claim(cpu, mem, gpu=gpu) == expected


def test_a_replica_that_requests_nothing_takes_no_room() -> None:
    index = index_of({"a": (1000, 1000, 0)})
    assert [index.claim(0, 0, gpu=0) for _ in range(3)] == ["a", "a", "a"]
    assert index.claim(1000, 1000, gpu=0) == "a"
    assert index.claim(1, 0, gpu=0) is None


def test_room_is_taken_until_the_node_is_full() -> None:
    index = index_of({"a": (3000, 3000, 2), "b": (3000, 3000, 2)})
    claims = [index.claim(1000, 1000, gpu=1) for _ in range(5)]
    assert claims == ["a", "a", "b", "b", None]


room = st.tuples(st.integers(-2000, 16_000), st.integers(-1000, 64_000), st.integers(-1, 8))
request = st.tuples(
    st.sampled_from([0, 250, 500, 1000, 4000]),
    st.sampled_from([0, 537, 1074, 4296]),
    st.integers(0, 2),
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.dictionaries(st.sampled_from([f"n{i}" for i in range(12)]), room, min_size=1),
    requests=st.lists(request, max_size=60),
)
def test_every_claim_is_the_brute_force_best_fit(
    nodes: dict[str, Room], requests: list[Room]
) -> None:
    index = index_of(nodes)
    free = dict(nodes)
    for cpu, mem, gpu in requests:
        assert index.claim(cpu, mem, gpu=gpu) == brute_force_claim(free, cpu, mem, gpu)
