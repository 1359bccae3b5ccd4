"""Pod requests, node room and EDL's cluster inquiry (scheduler_core.accounting)."""

from __future__ import annotations

import random
from fractions import Fraction as F
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.accounting import (
    add_resource_list,
    inquire,
    node_offers_room,
    pod_is_terminated,
    pod_is_unschedulable,
    pod_limits,
    pod_requests,
    replica_resources,
)
from scheduler_core.models import ClusterResource, NodeResources, Resources
from scheduler_core.quantities import QuantityError
from tests.unit.builders import container, job, node, pod

GPU = "nvidia.com/gpu"
MI = 2**20

# --- add_resource_list ---------------------------------------------------------


def test_add_resource_list_adds_and_creates_without_mutating() -> None:
    a = {"cpu": F(1)}
    total = add_resource_list(a, {"cpu": "500m", "memory": "1Gi"})
    assert total == {"cpu": F(3, 2), "memory": F(2**30)}
    assert a == {"cpu": F(1)}


def test_add_resource_list_rejects_bad_quantities() -> None:
    with pytest.raises(QuantityError, match="'12x'"):
        add_resource_list({}, {"cpu": "12x"})


# --- pod requests and limits -----------------------------------------------------


def requests_of(**spec: Any) -> dict[str, F]:
    return pod_requests(pod("p", **spec))


def test_requests_sum_app_containers() -> None:
    got = requests_of(
        containers=[
            container(requests={"cpu": "500m", "memory": "1Gi"}),
            container(requests={"cpu": "250m", GPU: 1}),
        ]
    )
    assert got == {"cpu": F(3, 4), "memory": F(2**30), GPU: F(1)}


@pytest.mark.parametrize(
    ("init_cpu", "init_memory", "expected_cpu", "expected_memory"),
    [
        # Per resource: max(sum of app containers, largest init container).
        ("2", "100Mi", F(2), F(1024 * MI)),
        ("100m", "4Gi", F(3, 2), F(4 * 1024 * MI)),
        ("1500m", "1Gi", F(3, 2), F(1024 * MI)),
    ],
)
def test_requests_take_the_init_container_peak_per_resource(
    init_cpu: str, init_memory: str, expected_cpu: F, expected_memory: F
) -> None:
    got = requests_of(
        containers=[
            container(requests={"cpu": "1", "memory": "512Mi"}),
            container(requests={"cpu": "500m", "memory": "512Mi"}),
        ],
        init_containers=[
            container(requests={"cpu": "100m"}),
            container(requests={"cpu": init_cpu, "memory": init_memory}),
        ],
    )
    assert got == {"cpu": expected_cpu, "memory": expected_memory}


def test_init_only_resource_is_requested() -> None:
    got = requests_of(
        containers=[container(requests={"cpu": "1"})],
        init_containers=[container(requests={GPU: 1})],
    )
    assert got == {"cpu": F(1), GPU: F(1)}


def test_sidecars_add_to_the_sum_and_to_later_init_containers() -> None:
    got = requests_of(
        containers=[container(requests={"cpu": "1"})],
        init_containers=[
            container(requests={"cpu": "2"}),  # runs alone: 2
            container(requests={"cpu": "500m"}, restart_policy="Always"),  # sidecar
            container(requests={"cpu": "2"}),  # runs beside the sidecar: 2.5
        ],
    )
    assert got == {"cpu": F(5, 2)}


def test_overhead_is_added_to_requests() -> None:
    got = requests_of(
        containers=[container(requests={"cpu": "1"})],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert got == {"cpu": F(5, 4), "memory": F(120 * MI)}


def test_a_limit_without_a_request_requests_the_limit() -> None:
    got = requests_of(
        containers=[container(requests={"cpu": "1"}, limits={"cpu": "4", "memory": "2Gi"})]
    )
    assert got == {"cpu": F(1), "memory": F(2 * 1024 * MI)}


def test_containers_without_resources_request_nothing() -> None:
    assert requests_of(containers=[container(), {"name": "bare"}]) == {}


def test_pod_level_resources_replace_container_cpu_and_memory() -> None:
    manifest = pod("p", containers=[container(requests={"cpu": "1", "memory": "1Gi", GPU: 1})])
    manifest["spec"]["resources"] = {"limits": {"cpu": "4"}, "requests": {"memory": "3Gi"}}
    assert pod_requests(manifest) == {"cpu": F(4), "memory": F(3 * 1024 * MI), GPU: F(1)}
    assert pod_limits(manifest) == {"cpu": F(4)}


def test_limits_sum_max_and_overhead_only_where_limited() -> None:
    got = pod_limits(
        pod(
            "p",
            containers=[
                container(limits={"cpu": "1", GPU: 1}),
                container(limits={"cpu": "1"}),
            ],
            init_containers=[container(limits={"cpu": "3", "memory": "1Gi"})],
            overhead={"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
        )
    )
    # memory is limited only by the init container, and that still counts;
    # ephemeral-storage has no limit, so overhead does not invent one.
    assert got == {"cpu": F(31, 10), "memory": F(1088 * MI), GPU: F(1)}


def test_requests_of_a_raw_api_pod_with_nulls() -> None:
    raw = {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": None}]}}
    assert pod_requests(raw) == {}
    assert pod_requests({}) == {}


# --- predicates ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "offers_room"),
    [
        (node("n"), True),
        (node("n", unschedulable=True), False),
        (node("n", ready=False), False),
        (node("n", unschedulable=True, ready=False), False),
        ({"metadata": {"name": "n"}, "status": {}}, False),  # no Ready condition
        (
            {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
            False,
        ),
    ],
)
def test_node_offers_room(manifest: dict[str, Any], offers_room: bool) -> None:
    assert node_offers_room(manifest) is offers_room


def test_pod_is_unschedulable_only_for_the_unschedulable_reason() -> None:
    assert pod_is_unschedulable(pod("p", unschedulable=True))
    assert not pod_is_unschedulable(pod("p", node="n"))
    assert not pod_is_unschedulable(pod("p", phase="Pending"))
    gated = pod("p", phase="Pending")
    gated["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    assert not pod_is_unschedulable(gated)


@pytest.mark.parametrize(
    ("phase", "terminated"),
    [
        ("Succeeded", True),
        ("Failed", True),
        ("Running", False),
        ("Pending", False),
        ("Unknown", False),
    ],
)
def test_pod_is_terminated(phase: str, terminated: bool) -> None:
    assert pod_is_terminated(pod("p", phase=phase)) is terminated


# --- inquire ---------------------------------------------------------------------


def cpu_pod(name: str, cpu: str, **kwargs: Any) -> dict[str, Any]:
    return pod(name, containers=[container(requests={"cpu": cpu}, limits={"cpu": cpu})], **kwargs)


def test_inquire_small_cluster_exactly() -> None:
    nodes = [node("a", cpu="4", memory="8Gi", gpu=2), node("b", cpu="2", memory="4000M", gpu=0)]
    pods = [
        pod(
            "train-0",
            node="a",
            containers=[
                container(
                    requests={"cpu": "1500m", "memory": "1Gi", GPU: 1},
                    limits={"cpu": "2", "memory": "2Gi", GPU: 1},
                )
            ],
        ),
        pod("web", node="b", containers=[container(requests={"cpu": "500m", "memory": "500M"})]),
    ]
    assert inquire(nodes, pods) == ClusterResource(
        node_count=2,
        gpu_request=1,
        gpu_limit=1,
        gpu_total=2,
        cpu_request_milli=2000,
        cpu_limit_milli=2000,
        cpu_total_milli=6000,
        memory_request_mega=1574,  # ceil(1073.741824 + 500)
        memory_limit_mega=2148,  # ceil(2147.483648)
        memory_total_mega=12590,  # ceil(8589.934592 + 4000)
        nodes=NodeResources(
            nodes_cpu_idle_milli={"a": 2500, "b": 1500},
            nodes_memory_free_mega={"a": 8590 - 1074, "b": 3500},
            nodes_gpu_free={"a": 1, "b": 0},
        ),
    )


def test_inquire_ignores_succeeded_and_failed_pods() -> None:
    nodes = [node("a", cpu="4")]
    pods = [
        cpu_pod("done", "1", node="a", phase="Succeeded"),
        cpu_pod("crashed", "1", node="a", phase="Failed"),
        cpu_pod("live", "1", node="a"),
    ]
    got = inquire(nodes, pods)
    assert got.cpu_request_milli == 1000
    assert got.cpu_limit_milli == 1000
    assert got.nodes.nodes_cpu_idle_milli == {"a": 3000}


def test_pending_pods_count_in_cluster_requests_but_on_no_node() -> None:
    nodes = [node("a", cpu="4")]
    pods = [cpu_pod("bound", "1", node="a"), cpu_pod("waiting", "2", unschedulable=True)]
    got = inquire(nodes, pods)
    assert got.cpu_request_milli == 3000
    assert got.nodes.nodes_cpu_idle_milli == {"a": 3000}


def test_cordoned_and_not_ready_nodes_count_in_totals_but_offer_no_room() -> None:
    nodes = [
        node("ok", cpu="4", gpu=1),
        node("cordoned", cpu="8", gpu=2, unschedulable=True),
        node("down", cpu="16", gpu=4, ready=False),
    ]
    pods = [cpu_pod("on-cordoned", "1", node="cordoned")]
    got = inquire(nodes, pods)
    assert (got.node_count, got.cpu_total_milli, got.gpu_total) == (3, 28000, 7)
    assert got.cpu_request_milli == 1000
    assert got.nodes.nodes_cpu_idle_milli == {"ok": 4000}
    assert got.nodes.nodes_memory_free_mega.keys() == {"ok"}
    assert got.nodes.nodes_gpu_free == {"ok": 1}


def test_pods_on_unknown_nodes_count_in_cluster_requests_only() -> None:
    got = inquire([node("a", cpu="4")], [cpu_pod("elsewhere", "1", node="gone")])
    assert got.cpu_request_milli == 1000
    assert got.nodes.nodes_cpu_idle_milli == {"a": 4000}


def test_gpu_resource_name_is_configurable() -> None:
    amd = "amd.com/gpu"
    nodes = [node("a", gpu=8, gpu_resource=amd), node("b", gpu=4)]
    pods = [pod("p", node="a", containers=[container(limits={amd: 2, GPU: 1})])]
    got = inquire(nodes, pods, gpu_resource=amd)
    assert (got.gpu_total, got.gpu_request, got.gpu_limit) == (8, 2, 2)
    assert got.nodes.nodes_gpu_free == {"a": 6, "b": 0}
    default = inquire(nodes, pods)
    assert (default.gpu_total, default.gpu_request) == (4, 1)
    assert default.nodes.nodes_gpu_free == {"a": -1, "b": 4}  # over-committed shows as negative


def test_sums_are_exact_before_rounding_once() -> None:
    # Three half-millicore pods: 1.5m in all, 2m after one ceil (not 3 x 1m).
    pods = [cpu_pod(f"p{i}", "500u", node="a") for i in range(3)]
    got = inquire([node("a", cpu="1")], pods)
    assert got.cpu_request_milli == 2
    assert got.nodes.nodes_cpu_idle_milli == {"a": 998}


def test_empty_cluster() -> None:
    assert inquire([], []) == ClusterResource()


def test_inquire_accepts_any_iterables() -> None:
    got = inquire(iter([node("a")]), (p for p in [cpu_pod("x", "1", node="a")]))
    assert got.nodes.nodes_cpu_idle_milli == {"a": 7000}


# --- replica_resources -------------------------------------------------------------


def test_replica_resources_from_a_pod_template() -> None:
    template = {
        "metadata": {"labels": {"app": "train"}},
        "spec": pod(
            "ignored",
            containers=[
                container(requests={"cpu": "1500m", "memory": "1Gi"}, limits={"cpu": "2", GPU: 1})
            ],
            init_containers=[container(requests={"cpu": "3"})],
            overhead={"memory": "100M"},
        )["spec"],
    }
    requests, limits = replica_resources(template)
    assert requests == Resources(cpu_milli=3000, memory_mega=1174, gpu=1)
    assert limits == Resources(cpu_milli=2000, memory_mega=0, gpu=1)
    assert replica_resources(template["spec"]) == (requests, limits)


def test_replica_resources_with_another_gpu_resource() -> None:
    spec = {"containers": [container(limits={"amd.com/gpu": 2})]}
    requests, limits = replica_resources(spec, gpu_resource="amd.com/gpu")
    assert requests == limits == Resources(gpu=2, gpu_resource="amd.com/gpu")


def test_job_builder_defaults_and_overrides() -> None:
    built = job("j", max_replicas=8, namespace="ml")
    assert (built.key, built.min_replicas, built.max_replicas) == ("ml/j", 1, 8)


# --- properties ----------------------------------------------------------------------

node_shapes = st.lists(
    st.tuples(
        st.integers(0, 64_000),  # cpu milli
        st.integers(0, 256 * 1024),  # memory Mi
        st.integers(0, 8),  # gpus
        st.booleans(),  # unschedulable
        st.booleans(),  # ready
    ),
    min_size=1,
    max_size=6,
)
pod_shapes = st.lists(
    st.tuples(
        st.integers(0, 8_000),
        st.integers(0, 16 * 1024),
        st.integers(0, 2),
        st.integers(-1, 6),  # node index; -1: pending, past the end: unknown node
        st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
    ),
    max_size=20,
)


def build_cluster(
    node_rows: list[tuple[int, int, int, bool, bool]],
    pod_rows: list[tuple[int, int, int, int, str]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [
        node(f"n{i}", cpu=f"{cpu}m", memory=f"{mem}Mi", gpu=gpu, unschedulable=cordon, ready=ready)
        for i, (cpu, mem, gpu, cordon, ready) in enumerate(node_rows)
    ]
    pods = [
        pod(
            f"p{i}",
            node=None if where < 0 else f"n{where}",
            phase=phase,
            containers=[container(requests={"cpu": f"{cpu}m", "memory": f"{mem}Mi", GPU: gpu})],
        )
        for i, (cpu, mem, gpu, where, phase) in enumerate(pod_rows)
    ]
    return nodes, pods


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@settings(max_examples=200, deadline=None)
@given(node_shapes, pod_shapes)
def test_room_plus_bound_requests_is_allocatable(
    node_rows: list[tuple[int, int, int, bool, bool]],
    pod_rows: list[tuple[int, int, int, int, str]],
) -> None:
    nodes, pods = build_cluster(node_rows, pod_rows)
    got = inquire(nodes, pods)
    for i, (cpu, mem, gpu, cordon, ready) in enumerate(node_rows):
        name = f"n{i}"
        if cordon or not ready:
            assert name not in got.nodes.nodes_cpu_idle_milli
            continue
        bound = [row for row in pod_rows if row[3] == i and row[4] not in ("Succeeded", "Failed")]
        bound_cpu = sum(row[0] for row in bound)
        bound_mem_mi = sum(row[1] for row in bound)
        bound_gpu = sum(row[2] for row in bound)
        assert got.nodes.nodes_cpu_idle_milli[name] + bound_cpu == cpu
        assert got.nodes.nodes_memory_free_mega[name] + ceil_div(
            bound_mem_mi * MI, 10**6
        ) == ceil_div(mem * MI, 10**6)
        assert got.nodes.nodes_gpu_free[name] + bound_gpu == gpu
    live = [row for row in pod_rows if row[4] not in ("Succeeded", "Failed")]
    assert got.cpu_request_milli == sum(row[0] for row in live)
    assert got.cpu_total_milli == sum(row[0] for row in node_rows)
    assert got.node_count == len(node_rows)


@settings(max_examples=100, deadline=None)
@given(node_shapes, pod_shapes, st.randoms(use_true_random=False))
def test_order_of_nodes_and_pods_does_not_matter(
    node_rows: list[tuple[int, int, int, bool, bool]],
    pod_rows: list[tuple[int, int, int, int, str]],
    rng: random.Random,
) -> None:
    nodes, pods = build_cluster(node_rows, pod_rows)
    expected = inquire(nodes, pods)
    rng.shuffle(nodes)
    rng.shuffle(pods)
    assert inquire(nodes, pods) == expected
