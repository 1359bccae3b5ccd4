"""Cluster accounting: what pods request and what nodes have left.

Pure functions over node and pod dicts exactly as the Kubernetes API returns
them in JSON (camelCase keys). Owns the effective request of a pod (the
kube-scheduler rule), node readiness, pod state predicates and EDL's
``InquiryResource`` (``inquire``), which turns nodes and pods into the
``ClusterResource`` snapshot the policies read.

Quantities stay exact ``Fraction`` values until the very end: every sum is
exact, and each total is converted to integer milli/mega/units once, so
rounding never accumulates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any

from scheduler_core.models import (
    DEFAULT_GPU_RESOURCE,
    ClusterResource,
    NodeResources,
    Resources,
)
from scheduler_core.quantities import QuantityLike, parse_quantity, to_mega, to_milli, to_units

ResourceList = dict[str, Fraction]
KubeObject = Mapping[str, Any]

CPU = "cpu"
MEMORY = "memory"
# kube: pod-level ``spec.resources`` may only set these (plus hugepages-*).
_POD_LEVEL_RESOURCES = frozenset({CPU, MEMORY})
_TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


def _mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object field, or an empty one when the API omitted it (null or absent)."""
    return value if isinstance(value, Mapping) else {}


def _objects(value: Any) -> list[Mapping[str, Any]]:
    """A JSON array of objects, or an empty one when the API omitted it."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def resource_list(raw: Mapping[str, QuantityLike] | None) -> ResourceList:
    """Parse a Kubernetes ``ResourceList`` (name -> quantity text) into exact values."""
    return {name: parse_quantity(quantity) for name, quantity in (raw or {}).items()}


def add_resource_list(a: Mapping[str, Fraction], b: Mapping[str, Fraction | str]) -> ResourceList:
    """EDL ``AddResourceList``: ``a`` plus ``b``, creating names missing in ``a``.

    Unlike EDL's version this never mutates ``a``; it returns a new dict.
    """
    total = dict(a)
    for name, quantity in b.items():
        total[name] = total.get(name, Fraction(0)) + parse_quantity(quantity)
    return total


def _max_resource_list(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> ResourceList:
    """Per resource, the larger of the two (a name missing on one side counts as 0)."""
    larger = dict(a)
    for name, quantity in b.items():
        larger[name] = max(larger.get(name, Fraction(0)), quantity)
    return larger


def container_requests(container: KubeObject) -> ResourceList:
    """A container's requests; a resource with only a limit requests its limit.

    That is what API-server defaulting stores; raw manifests may lack it.
    """
    resources = _mapping(container.get("resources"))
    requests = resource_list(_mapping(resources.get("limits")))
    requests.update(resource_list(_mapping(resources.get("requests"))))
    return requests


def container_limits(container: KubeObject) -> ResourceList:
    return resource_list(_mapping(_mapping(container.get("resources")).get("limits")))


def _is_sidecar(container: KubeObject) -> bool:
    """A restartable init container (KEP-753 sidecar): runs alongside the app containers."""
    return container.get("restartPolicy") == "Always"


def _aggregate(
    pod_spec: KubeObject, per_container: Callable[[KubeObject], ResourceList]
) -> ResourceList:
    """kube-scheduler ``AggregateContainerRequests``/``Limits``.

    The sum over app containers and sidecars, raised per resource to the
    peak of any init container (which runs with the sidecars started before it).
    """
    total: ResourceList = {}
    for container in _objects(pod_spec.get("containers")):
        total = add_resource_list(total, per_container(container))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in _objects(pod_spec.get("initContainers")):
        own = per_container(container)
        if _is_sidecar(container):
            total = add_resource_list(total, own)
            sidecars = add_resource_list(sidecars, own)
            running = sidecars
        else:
            running = add_resource_list(own, sidecars)
        init_peak = _max_resource_list(init_peak, running)
    return _max_resource_list(total, init_peak)


def _pod_level(pod_spec: KubeObject, field: str) -> ResourceList:
    """Pod-level ``spec.resources`` (KEP-2837); they replace the container sum."""
    resources = _mapping(pod_spec.get("resources"))
    values = resource_list(_mapping(resources.get(field)))
    if field == "requests":
        # Defaulting: a pod-level limit without a pod-level request requests the limit.
        values = {**resource_list(_mapping(resources.get("limits"))), **values}
    return {
        name: quantity
        for name, quantity in values.items()
        if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-")
    }


def pod_spec_requests(pod_spec: KubeObject) -> ResourceList:
    """Effective requests of a pod spec, as kube-scheduler's ``PodRequests`` computes them."""
    requests = _aggregate(pod_spec, container_requests)
    requests.update(_pod_level(pod_spec, "requests"))
    # kube: the runtime's overhead is added to every request.
    return add_resource_list(requests, resource_list(_mapping(pod_spec.get("overhead"))))


def pod_spec_limits(pod_spec: KubeObject) -> ResourceList:
    """Effective limits of a pod spec, as kube-scheduler's ``PodLimits`` computes them.

    Overhead is added only to resources that have a limit: a resource
    without one stays unlimited (kube ``PodLimits``).
    """
    limits = _aggregate(pod_spec, container_limits)
    limits.update(_pod_level(pod_spec, "limits"))
    overhead = resource_list(_mapping(pod_spec.get("overhead")))
    return {name: quantity + overhead.get(name, Fraction(0)) for name, quantity in limits.items()}


def pod_requests(pod: KubeObject) -> ResourceList:
    """What the scheduler reserves for a pod: max(sum of containers, peak init) + overhead."""
    return pod_spec_requests(_mapping(pod.get("spec")))


def pod_limits(pod: KubeObject) -> ResourceList:
    return pod_spec_limits(_mapping(pod.get("spec")))


def _condition_status(obj: KubeObject, condition_type: str) -> tuple[str | None, str | None]:
    for condition in _objects(_mapping(obj.get("status")).get("conditions")):
        if condition.get("type") == condition_type:
            return condition.get("status"), condition.get("reason")
    return None, None


def node_offers_room(node: KubeObject) -> bool:
    """A node can take new pods: not cordoned and its Ready condition is "True"."""
    if _mapping(node.get("spec")).get("unschedulable") is True:
        return False
    status, _ = _condition_status(node, "Ready")
    return status == "True"


def pod_is_unschedulable(pod: KubeObject) -> bool:
    """EDL pending rule: the scheduler found no node (PodScheduled=False, Unschedulable)."""
    status, reason = _condition_status(pod, "PodScheduled")
    return status == "False" and reason == "Unschedulable"


def pod_is_terminated(pod: KubeObject) -> bool:
    return _mapping(pod.get("status")).get("phase") in _TERMINATED_PHASES


def _name(obj: KubeObject) -> str:
    return str(_mapping(obj.get("metadata")).get("name", ""))


def _node_name(pod: KubeObject) -> str:
    return str(_mapping(pod.get("spec")).get("nodeName") or "")


def _amount(resources: Mapping[str, Fraction], name: str) -> Fraction:
    return resources.get(name, Fraction(0))


def inquire(
    nodes: Iterable[KubeObject],
    pods: Iterable[KubeObject],
    *,
    gpu_resource: str = DEFAULT_GPU_RESOURCE,
) -> ClusterResource:
    """EDL ``InquiryResource``: totals, requests, limits and per-node room.

    * Totals count every node's allocatable, cordoned or NotReady too (EDL).
    * Requests and limits count every pod not Succeeded/Failed, bound or
      pending: "pending pods need to be calculated for scale down" (EDL).
    * Per-node room (allocatable minus the requests of the live pods bound
      there) is reported only for nodes that offer room; the rest are absent.
      Room may be negative on an over-committed node.
    * Pods bound to a node not in ``nodes`` count in cluster requests only.
    """
    node_list = list(nodes)
    live_pods = [pod for pod in pods if not pod_is_terminated(pod)]

    allocatable: ResourceList = {}
    for node in node_list:
        allocatable = add_resource_list(allocatable, resource_list(_node_allocatable(node)))

    requests: ResourceList = {}
    limits: ResourceList = {}
    bound: dict[str, ResourceList] = {}
    for pod in live_pods:
        pod_request = pod_requests(pod)
        requests = add_resource_list(requests, pod_request)
        limits = add_resource_list(limits, pod_limits(pod))
        node_name = _node_name(pod)
        if node_name:
            bound[node_name] = add_resource_list(bound.get(node_name, {}), pod_request)

    rooms: dict[str, tuple[int, int, int]] = {}
    for node in node_list:
        if node_offers_room(node):
            name = _name(node)
            rooms[name] = node_room(
                resource_list(_node_allocatable(node)),
                bound.get(name, {}),
                gpu_resource=gpu_resource,
            )
    return cluster_resource(
        node_count=len(node_list),
        allocatable=allocatable,
        requests=requests,
        limits=limits,
        rooms=rooms,
        gpu_resource=gpu_resource,
    )


def node_room(
    allocatable: Mapping[str, Fraction], used: Mapping[str, Fraction], *, gpu_resource: str
) -> tuple[int, int, int]:
    """A node's (milli-CPU, mega memory, GPUs) room: allocatable minus the bound requests.

    Allocatable and the exact request sum are converted once each, then
    subtracted: room + converted requests == converted allocatable.
    """
    return (
        to_milli(_amount(allocatable, CPU)) - to_milli(_amount(used, CPU)),
        to_mega(_amount(allocatable, MEMORY)) - to_mega(_amount(used, MEMORY)),
        to_units(_amount(allocatable, gpu_resource)) - to_units(_amount(used, gpu_resource)),
    )


def cluster_resource(
    *,
    node_count: int,
    allocatable: Mapping[str, Fraction],
    requests: Mapping[str, Fraction],
    limits: Mapping[str, Fraction],
    rooms: Mapping[str, tuple[int, int, int]],
    gpu_resource: str,
) -> ClusterResource:
    """The ``ClusterResource`` of exact sums and per-node rooms (``node_room``)."""
    return ClusterResource(
        node_count=node_count,
        gpu_request=to_units(_amount(requests, gpu_resource)),
        gpu_limit=to_units(_amount(limits, gpu_resource)),
        gpu_total=to_units(_amount(allocatable, gpu_resource)),
        cpu_request_milli=to_milli(_amount(requests, CPU)),
        cpu_limit_milli=to_milli(_amount(limits, CPU)),
        cpu_total_milli=to_milli(_amount(allocatable, CPU)),
        memory_request_mega=to_mega(_amount(requests, MEMORY)),
        memory_limit_mega=to_mega(_amount(limits, MEMORY)),
        memory_total_mega=to_mega(_amount(allocatable, MEMORY)),
        nodes=NodeResources(
            nodes_cpu_idle_milli={name: room[0] for name, room in rooms.items()},
            nodes_memory_free_mega={name: room[1] for name, room in rooms.items()},
            nodes_gpu_free={name: room[2] for name, room in rooms.items()},
        ),
    )


def _node_allocatable(node: KubeObject) -> Mapping[str, Any]:
    return _mapping(_mapping(node.get("status")).get("allocatable"))


def _resources(resources: Mapping[str, Fraction], *, gpu_resource: str) -> Resources:
    return Resources(
        cpu_milli=to_milli(_amount(resources, CPU)),
        memory_mega=to_mega(_amount(resources, MEMORY)),
        gpu=to_units(_amount(resources, gpu_resource)),
        gpu_resource=gpu_resource,
    )


def replica_resources(
    pod_template_spec: KubeObject, *, gpu_resource: str = DEFAULT_GPU_RESOURCE
) -> tuple[Resources, Resources]:
    """Per-replica (requests, limits) of a pod template, by the effective-request rule.

    Accepts a ``PodTemplateSpec`` (``{"metadata": ..., "spec": ...}``) or a
    bare ``PodSpec`` (recognised by its ``containers`` key).
    """
    pod_spec = (
        pod_template_spec
        if "containers" in pod_template_spec
        else _mapping(pod_template_spec.get("spec"))
    )
    return (
        _resources(pod_spec_requests(pod_spec), gpu_resource=gpu_resource),
        _resources(pod_spec_limits(pod_spec), gpu_resource=gpu_resource),
    )
