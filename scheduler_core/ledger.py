"""The cluster's resource ledger, kept up to date one object at a time.

``accounting.inquire`` recounts every pod on every call: O(pods) per
autoscale round. ``ClusterLedger`` holds the same sums and is told of each
change instead (a node or pod put, removed, or all of one kind replaced), so
a snapshot costs O(nodes offering room) and a change costs O(its resources).

It applies the same rules as ``inquire``, with the same helpers (effective
requests and limits, node readiness, terminated phases), and keeps every sum
as an exact ``Fraction``: adding and taking away a pod's requests leaves the
sum exactly as a recount would, so ``snapshot()`` equals
``inquire(nodes, pods)`` over the objects it was told of. The per-node room
is converted to integers only for nodes whose sums changed since the last
snapshot.

Pure: the caller (an informer's event handler) decides when and locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from scheduler_core.accounting import (
    KubeObject,
    ResourceList,
    cluster_resource,
    node_offers_room,
    node_room,
    pod_is_terminated,
    pod_limits,
    pod_requests,
    resource_list,
)
from scheduler_core.models import DEFAULT_GPU_RESOURCE, ClusterResource

_ZERO = Fraction(0)
_MAX_SHAPES = 4096


@dataclass(frozen=True, slots=True)
class _Node:
    name: str
    allocatable: ResourceList
    offers_room: bool


@dataclass(frozen=True, slots=True)
class _Pod:
    node_name: str
    requests: ResourceList
    limits: ResourceList


def _add(total: dict[str, Fraction], change: Mapping[str, Fraction], *, sign: int) -> None:
    for name, quantity in change.items():
        total[name] = total.get(name, _ZERO) + sign * quantity


class ClusterLedger:
    """Cluster totals and per-node room, updated per node and per pod.

    Nodes and pods are named by the caller's key (an informer's store key);
    nodes keep the order they were first put in, as an informer's store does.
    """

    def __init__(self, *, gpu_resource: str = DEFAULT_GPU_RESOURCE) -> None:
        self._gpu_resource = gpu_resource
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, _Pod] = {}
        self._allocatable: dict[str, Fraction] = {}
        self._requests: dict[str, Fraction] = {}
        self._limits: dict[str, Fraction] = {}
        # node name -> requests of the live pods bound there (the node may be absent)
        self._bound: dict[str, dict[str, Fraction]] = {}
        # node name -> (idle cpu milli, free memory mega, free gpus), for nodes whose sums held still
        self._room: dict[str, tuple[int, int, int]] = {}
        # One dict per distinct resource list: the replicas of a job all request the same.
        self._shapes: dict[frozenset[tuple[str, Fraction]], ResourceList] = {}

    # --- nodes ---------------------------------------------------------------

    def put_node(self, key: str, node: KubeObject) -> None:
        self.remove_node(key, keep_position=True)
        meta = node.get("metadata")
        name = str(meta.get("name", "")) if isinstance(meta, Mapping) else ""
        status = node.get("status")
        allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
        entry = _Node(
            name=name,
            allocatable=resource_list(allocatable if isinstance(allocatable, Mapping) else None),
            offers_room=node_offers_room(node),
        )
        self._nodes[key] = entry
        _add(self._allocatable, entry.allocatable, sign=1)
        self._room.pop(name, None)

    def remove_node(self, key: str, *, keep_position: bool = False) -> None:
        entry = self._nodes.get(key)
        if entry is None:
            return
        if not keep_position:
            del self._nodes[key]
        _add(self._allocatable, entry.allocatable, sign=-1)
        self._room.pop(entry.name, None)

    def replace_nodes(self, nodes: Iterable[tuple[str, KubeObject]]) -> None:
        self._nodes = {}
        self._allocatable = {}
        self._room = {}
        for key, node in nodes:
            self.put_node(key, node)

    # --- pods ----------------------------------------------------------------

    def put_pod(self, key: str, pod: KubeObject) -> None:
        self.remove_pod(key)
        if pod_is_terminated(pod):
            return  # EDL: a Succeeded/Failed pod holds nothing
        spec = pod.get("spec")
        node_name = str((spec.get("nodeName") if isinstance(spec, Mapping) else None) or "")
        entry = _Pod(
            node_name=node_name,
            requests=self._shared(pod_requests(pod)),
            limits=self._shared(pod_limits(pod)),
        )
        self._pods[key] = entry
        self._count(entry, 1)

    def _shared(self, resources: ResourceList) -> ResourceList:
        """The one stored copy of ``resources`` (read only: never mutated)."""
        if len(self._shapes) >= _MAX_SHAPES:
            self._shapes.clear()  # bounded: sharing is only a saving
        return self._shapes.setdefault(frozenset(resources.items()), resources)

    def remove_pod(self, key: str) -> None:
        entry = self._pods.pop(key, None)
        if entry is not None:
            self._count(entry, -1)

    def replace_pods(self, pods: Iterable[tuple[str, KubeObject]]) -> None:
        self._pods = {}
        self._requests = {}
        self._limits = {}
        self._bound = {}
        self._room = {}
        for key, pod in pods:
            self.put_pod(key, pod)

    def _count(self, entry: _Pod, sign: int) -> None:
        _add(self._requests, entry.requests, sign=sign)
        _add(self._limits, entry.limits, sign=sign)
        if entry.node_name:
            _add(self._bound.setdefault(entry.node_name, {}), entry.requests, sign=sign)
            self._room.pop(entry.node_name, None)

    # --- the snapshot ----------------------------------------------------------

    def snapshot(self) -> ClusterResource:
        """EDL ``InquiryResource`` over what the ledger was told: ``inquire``'s answer."""
        rooms: dict[str, tuple[int, int, int]] = {}
        cached = self._room
        for node in self._nodes.values():
            if not node.offers_room:
                continue
            room = cached.get(node.name)
            if room is None:
                room = cached[node.name] = node_room(
                    node.allocatable,
                    self._bound.get(node.name, {}),
                    gpu_resource=self._gpu_resource,
                )
            rooms[node.name] = room
        return cluster_resource(
            node_count=len(self._nodes),
            allocatable=self._allocatable,
            requests=self._requests,
            limits=self._limits,
            rooms=rooms,
            gpu_resource=self._gpu_resource,
        )
