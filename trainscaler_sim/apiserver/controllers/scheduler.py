"""Simulated kube-scheduler (and kubelet start-up): binds pending pods to the
Ready, schedulable node with the least capacity left after placement (best
fit, ties by name) among those whose allocatable minus the requests of bound,
non-terminated pods fits the pod's requests (cpu, memory, extended resources
such as nvidia.com/gpu). Unfit pods stay Pending with PodScheduled=False,
reason Unschedulable; all pending pods are retried whenever capacity changes,
in creation order.

Pods naming a scheduler profile the server was configured with (a
``KubeSchedulerConfiguration``, ``scoring.profiles_from_config``) are scored by
that profile's ``NodeResourcesFit`` strategy instead (``scoring.FitScoring``:
highest score wins, ties by node name), as that second scheduler would.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

from scheduler_core import accounting
from scheduler_core.quantities import parse_quantity

from ..errors import ApiError
from ..json_types import JsonObject
from ..operations import ApiOperations
from ..resources import ObjectRef
from ..store import StoreEvent, object_key
from .common import TERMINATED_PHASES, set_condition
from .scoring import FitScoring

Resources = dict[str, Fraction]
_DEFAULT_SCHEDULER = "default-scheduler"
_DEFAULT_MAX_PODS = Fraction(110)


def pod_requests(pod: JsonObject) -> Resources:
    """The pod's effective requests as kube-scheduler counts them, plus one pod slot."""
    total: Resources = dict(accounting.pod_requests(pod))
    total["pods"] = Fraction(1)
    return total


@dataclass
class NodeState:
    name: str
    allocatable: Resources
    ready: bool
    schedulable: bool
    labels: dict[str, str]
    taints: list[JsonObject]
    index: int
    used: Resources = field(default_factory=dict)
    pod_count: int = 0

    def free(self, resource: str) -> Fraction:
        capacity = self.allocatable.get(resource, _DEFAULT_MAX_PODS if resource == "pods" else 0)
        return Fraction(capacity) - self.used.get(resource, Fraction(0))


def _node_state(node: JsonObject, index: int) -> NodeState:
    status = node.get("status") or {}
    raw = status.get("allocatable") or status.get("capacity") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    spec = node.get("spec") or {}
    return NodeState(
        name=node["metadata"]["name"],
        allocatable={resource: parse_quantity(value) for resource, value in raw.items()},
        ready=ready,
        schedulable=not spec.get("unschedulable"),
        labels=dict((node.get("metadata") or {}).get("labels") or {}),
        taints=list(spec.get("taints") or []),
        index=index,
    )


def _tolerates(pod: JsonObject, taint: JsonObject) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        key = toleration.get("key")
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists" and (not key or key == taint.get("key")):
            return True
        if key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


class Scheduler:
    """Controller-manager participant; see the module docstring for the policy."""

    def __init__(
        self, operations: ApiOperations, *, profiles: dict[str, FitScoring] | None = None
    ) -> None:
        self.operations = operations
        # schedulerName -> scoring, besides the default scheduler's best fit.
        self.profiles = dict(profiles or {})
        self.store = operations.store
        self.pods = operations.resource("", "v1", plural="pods")
        self._nodes: dict[str, NodeState] = {}
        self._node_counter = 0
        self._bound: dict[tuple[str, str], tuple[str, Resources]] = {}
        self._pending: dict[tuple[str, str], None] = {}
        self._newly_pending: dict[tuple[str, str], None] = {}
        self._to_start: dict[tuple[str, str], None] = {}
        self._capacity_changed = False
        self._ip_counter = 0

    # -------------------------------------------------------------- tracking
    def _release(self, key: tuple[str, str]) -> None:
        bound = self._bound.pop(key, None)
        if bound is not None:
            node_name, requests = bound
            node = self._nodes.get(node_name)
            if node is not None:
                for resource, amount in requests.items():
                    node.used[resource] = node.used.get(resource, Fraction(0)) - amount
            self._capacity_changed = True

    def _account(self, key: tuple[str, str], node_name: str, *, requests: Resources) -> None:
        self._bound[key] = (node_name, requests)
        node = self._nodes.get(node_name)
        if node is not None:
            for resource, amount in requests.items():
                node.used[resource] = node.used.get(resource, Fraction(0)) + amount

    def observe(self, event: StoreEvent) -> None:
        if event.storage == "nodes":
            self._observe_node(event)
        elif event.storage == "pods":
            self._observe_pod(event)

    def _observe_node(self, event: StoreEvent) -> None:
        name = event.obj["metadata"]["name"]
        old = self._nodes.pop(name, None)
        if event.type != "DELETED":
            if old is None:
                self._node_counter += 1
            state = _node_state(event.obj, old.index if old else self._node_counter)
            state.used = old.used if old else {}
            if old is None:
                for node_name, requests in self._bound.values():
                    if node_name == name:
                        for resource, amount in requests.items():
                            state.used[resource] = state.used.get(resource, Fraction(0)) + amount
            self._nodes[name] = state
        self._capacity_changed = True

    def _observe_pod(self, event: StoreEvent) -> None:
        key = object_key(event.obj)
        pod = event.obj
        was_pending = key in self._pending
        self._pending.pop(key, None)
        self._to_start.pop(key, None)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node_name = spec.get("nodeName")
        if event.type == "DELETED" or status.get("phase") in TERMINATED_PHASES:
            self._newly_pending.pop(key, None)
            self._release(key)
            return
        if node_name:
            if key not in self._bound:
                self._account(key, node_name, requests=pod_requests(pod))
            if status.get("phase", "Pending") == "Pending":
                self._to_start[key] = None
        elif self._serves(spec.get("schedulerName", _DEFAULT_SCHEDULER)):
            self._pending[key] = None
            if not was_pending:
                self._newly_pending[key] = None

    def _serves(self, scheduler_name: str) -> bool:
        return scheduler_name == _DEFAULT_SCHEDULER or scheduler_name in self.profiles

    # ------------------------------------------------------------ reconciling
    def reconcile(self) -> None:
        for key in list(self._to_start):
            self._start(key)
        self._to_start.clear()
        if self._capacity_changed:
            candidates = list(self._pending)
        else:
            candidates = [key for key in self._newly_pending if key in self._pending]
        self._capacity_changed = False
        self._newly_pending.clear()
        candidates.sort(key=lambda key: self.store.creation_order("pods", key))
        for key in candidates:
            pod = self.store.get("pods", key)
            if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
                self._schedule(key, pod)

    def _fit(self, pod: JsonObject, requests: Resources) -> tuple[NodeState | None, str]:
        reasons: Counter[str] = Counter()
        best: tuple[Fraction, str, NodeState] | None = None
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        profile = self.profiles.get((pod.get("spec") or {}).get("schedulerName", ""))
        for name in sorted(self._nodes):
            node = self._nodes[name]
            if not node.ready:
                reasons["node(s) were not ready"] += 1
                continue
            if not node.schedulable:
                reasons["node(s) were unschedulable"] += 1
                continue
            if any(node.labels.get(k) != v for k, v in selector.items()):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            if not all(_tolerates(pod, taint) for taint in node.taints):
                reasons["node(s) had untolerated taint"] += 1
                continue
            short = [r for r, amount in requests.items() if amount > 0 and node.free(r) < amount]
            if short:
                for resource in short:
                    reasons[
                        "Too many pods" if resource == "pods" else f"Insufficient {resource}"
                    ] += 1
                continue
            if profile is not None:
                # Highest fit score first: negated so the smallest key wins, as below.
                score = profile.score(
                    allocatable=node.allocatable, used=node.used, requests=requests
                )
                if best is None or (Fraction(-score), name) < (best[0], best[1]):
                    best = (Fraction(-score), name, node)
                continue
            leftover = Fraction(0)
            for resource in set(requests) | {"cpu", "memory"}:
                capacity = node.allocatable.get(resource, Fraction(0))
                if capacity > 0 and resource != "pods":
                    leftover += (
                        node.free(resource) - requests.get(resource, Fraction(0))
                    ) / capacity
            if best is None or (leftover, name) < (best[0], best[1]):
                best = (leftover, name, node)
        if best is not None:
            return best[2], ""
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        total = len(self._nodes)
        message = f"0/{total} nodes are available"
        message += f": {detail}." if detail else "."
        message += f" preemption: 0/{total} nodes are available: {total} No preemption victims found for incoming pod."
        return None, message

    def _schedule(self, key: tuple[str, str], pod: JsonObject) -> None:
        requests = pod_requests(pod)
        node, message = self._fit(pod, requests)
        now = self.operations.now()
        if node is None:

            def mark_unschedulable(target: JsonObject) -> None:
                status = target.setdefault("status", {})
                status["phase"] = "Pending"
                status["conditions"] = set_condition(
                    list(status.get("conditions") or []),
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                    },
                    now=now,
                )

            self.operations.mutate(ObjectRef(self.pods, key[0], key[1]), mark_unschedulable)
            return
        self._account(key, node.name, requests=requests)
        self._pending.pop(key, None)
        self._run_on(key, node, now=now)

    def _start(self, key: tuple[str, str]) -> None:
        pod = self.store.get("pods", key)
        if pod is None or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        node = self._nodes.get((pod.get("spec") or {}).get("nodeName", ""))
        if node is not None:
            self._run_on(key, node, now=self.operations.now())

    def _run_on(self, key: tuple[str, str], node: NodeState, *, now: str) -> None:
        """Bind and start: what the scheduler and the kubelet would write."""
        self._ip_counter += 1
        pod_ip = f"10.244.{node.index % 256}.{self._ip_counter % 250 + 2}"
        host_ip = f"192.168.0.{node.index % 250 + 2}"

        def bind_and_run(target: JsonObject) -> None:
            spec = target.setdefault("spec", {})
            spec["nodeName"] = node.name
            status = target.setdefault("status", {})
            conditions = list(status.get("conditions") or [])
            for condition_type in (
                "PodScheduled",
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
            ):
                conditions = set_condition(
                    conditions,
                    {"type": condition_type, "status": "True", "lastProbeTime": None},
                    now=now,
                )
            status.update(
                {
                    "phase": "Running",
                    "conditions": conditions,
                    "hostIP": host_ip,
                    "hostIPs": [{"ip": host_ip}],
                    "podIP": pod_ip,
                    "podIPs": [{"ip": pod_ip}],
                    "startTime": now,
                    "containerStatuses": [
                        {
                            "name": container.get("name", ""),
                            "image": container.get("image", ""),
                            "imageID": f"sim://{container.get('image', '')}",
                            "containerID": f"containerd://{key[1]}-{container.get('name', '')}",
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": now}},
                        }
                        for container in spec.get("containers") or []
                    ],
                }
            )

        try:
            self.operations.mutate(ObjectRef(self.pods, key[0], key[1]), bind_and_run)
        except ApiError:
            self._release(key)
