"""The incremental cluster index against a recount from scratch.

Random sequences of watch events (ADDED, MODIFIED, DELETED) and re-LISTs go
through real ``Informer`` stores whose listeners feed a ``ClusterIndex``.
After every step the index must answer what a recount over the informers'
stores answers: ``accounting.inquire`` for the cluster snapshot and
``jobs.pods_of`` (a scan of every pod) for each target's pods. Neither
oracle uses the index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.accounting import inquire
from tests.unit.builders import container, node, pod
from workers.adapters.kubernetes.cache import Informer
from workers.adapters.kubernetes.cluster_index import ClusterIndex
from workers.adapters.kubernetes.jobs import ScaleTargetView, TargetPods, pods_of
from workers.adapters.kubernetes.kinds import NODES, PODS
from workers.adapters.kubernetes.selectors import Selector, from_label_selector, parse_selector

GPU = "nvidia.com/gpu"
NAMESPACES = ("ml", "team")
NODE_NAMES = ("n0", "n1", "n2", "gone")
POD_NAMES = tuple(f"p{i}" for i in range(8))


class OnePageClient:
    """Answers an informer's LIST with the objects it is given (one page)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def request(self, method: str, path: str, **_: Any) -> Mapping[str, Any]:
        return {"items": list(self.items), "metadata": {"resourceVersion": "1"}}


nodes = st.builds(
    lambda name, cpu, memory, gpu, cordoned, ready: node(
        name, cpu=cpu, memory=memory, gpu=gpu, unschedulable=cordoned, ready=ready
    ),
    st.sampled_from(NODE_NAMES[:3]),
    st.sampled_from(["4", "7500m", "16"]),
    st.sampled_from(["8Gi", "31Gi", "1000M"]),
    st.integers(0, 4),
    st.sampled_from([False, False, False, True]),  # cordoned: mostly not
    st.sampled_from([True, True, True, False]),  # Ready: mostly
)
pods = st.builds(
    lambda name, namespace, labels, bound, cpu, gpu, phase, unschedulable: pod(
        name,
        namespace=namespace,
        labels=labels,
        node=bound,
        phase=phase,
        unschedulable=unschedulable,
        containers=[container(requests={"cpu": cpu, "memory": "1Gi"}, limits={GPU: gpu})],
    ),
    st.sampled_from(POD_NAMES),
    st.sampled_from(NAMESPACES),
    st.dictionaries(
        st.sampled_from(["app", "role", "tier"]), st.sampled_from(["a", "b"]), max_size=3
    ),
    st.sampled_from([None, *NODE_NAMES]),
    st.sampled_from(["250m", "1", "1500m"]),
    st.integers(0, 2),
    st.sampled_from([None, "Running", "Running", "Pending", "Succeeded", "Failed"]),
    st.booleans(),
)
events: st.SearchStrategy[tuple[str, str, dict[str, Any]]] = st.one_of(
    st.tuples(st.sampled_from(["ADDED", "MODIFIED"]), st.just("node"), nodes),
    st.tuples(st.just("DELETED"), st.just("node"), nodes),
    st.tuples(st.sampled_from(["ADDED", "MODIFIED"]), st.just("pod"), pods),
    st.tuples(st.just("DELETED"), st.just("pod"), pods),
    st.tuples(st.just("LIST"), st.sampled_from(["node", "pod"]), st.just({})),
)
selectors: list[Selector] = [
    from_label_selector({"matchLabels": {"app": "a"}}),
    from_label_selector({"matchLabels": {"app": "a", "role": "b"}}),
    from_label_selector(
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}
    ),
    parse_selector("app=b,role!=a"),
    parse_selector("!tier"),
    parse_selector(""),
    from_label_selector(None),
]


def recounted_pods(informer: Informer, namespace: str, selector: Selector) -> TargetPods:
    view = ScaleTargetView(replicas=1, selector=selector, pod_template=None)
    return TargetPods.of(pods_of(view, namespace, pods=informer.list()))


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(events, min_size=5, max_size=40),
    listed=st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=6),
)
def test_the_index_matches_a_recount_after_any_events(
    steps: list[tuple[str, str, dict[str, Any]]], listed: list[tuple[bool, int]]
) -> None:
    index = ClusterIndex(gpu_resource=GPU)
    clients = {"node": OnePageClient(), "pod": OnePageClient()}
    informers = {
        "node": Informer(clients["node"], NODES, listener=index.node_listener),  # type: ignore[arg-type]
        "pod": Informer(clients["pod"], PODS, listener=index.pod_listener),  # type: ignore[arg-type]
    }
    for informer in informers.values():
        informer._list()
    seen: list[dict[str, Any]] = []
    for kind, which, obj in steps:
        informer = informers[which]
        if kind == "LIST":
            # A re-LIST (410 Gone): a subset of what was seen, in another order.
            chosen = [seen[i % len(seen)] for on, i in listed if on and seen]
            clients[which].items = [o for o in chosen if o["kind"].lower() == which]
            informer._list()
        else:
            seen.append(obj)
            informer._apply_events([{"type": kind, "object": obj}])
        assert index.snapshot() == inquire(
            informers["node"].list(), informers["pod"].list(), gpu_resource=GPU
        )
        targets = [(namespace, s) for namespace in NAMESPACES for s in selectors]
        for (namespace, selector), got in zip(targets, index.pods_of_each(targets), strict=True):
            expected = recounted_pods(informers["pod"], namespace, selector)
            assert (got.count, got.unschedulable) == (expected.count, expected.unschedulable)
            assert got.first is expected.first
            assert got.placement == expected.placement  # goodput predicts its grows from it
