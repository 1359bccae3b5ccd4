"""kube-apiserver's table printers for the built-in kinds served here.

Columns, priorities and cell formats follow ``pkg/printers/internalversion``:
the server always prints the wide cells; kubectl hides priority-1 columns
unless ``-o wide``. Kinds without a printer get the default Name/Created At.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .json_types import JsonObject, get_path
from .timefmt import human_age, parse_time

Cells = list[Any]


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> JsonObject:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


NAME = Column("Name", format="name", description="Name must be unique within a namespace.")
AGE = Column(
    "Age",
    description="CreationTimestamp is a timestamp representing the server time "
    "when this object was created.",
)
_NONE = "<none>"


def _age(obj: JsonObject, now: datetime) -> str:
    return human_age(get_path(obj, ".metadata.creationTimestamp"), now=now)


def _name(obj: JsonObject) -> str:
    return str(get_path(obj, ".metadata.name") or "")


def _containers_images(template_spec: Any) -> list[str]:
    containers = (template_spec or {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return [names, images]


def _selector(obj: JsonObject) -> str:
    """metav1.FormatLabelSelector: ``a=b,c in (d,e)``."""
    selector = get_path(obj, ".spec.selector")
    if not isinstance(selector, dict):
        return _NONE
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), str(expression.get("operator", ""))
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        if operator == "Exists":
            parts.append(str(key))
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {operator.lower()} ({values})")
    return ",".join(parts) or _NONE


def _pod(obj: JsonObject, now: datetime) -> Cells:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    reason = str(status.get("reason") or status.get("phase") or "")
    for container_status in statuses:
        waiting = (container_status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            reason = str(waiting["reason"])
    if get_path(obj, ".metadata.deletionTimestamp"):
        reason = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        _name(obj),
        f"{ready}/{len(containers)}",
        reason,
        restarts,
        _age(obj, now),
        status.get("podIP") or _NONE,
        spec.get("nodeName") or _NONE,
        status.get("nominatedNodeName") or _NONE,
        f"0/{len(gates)}" if gates else _NONE,
    ]


def _node(obj: JsonObject, now: datetime) -> Cells:
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    state = {"True": "Ready", "False": "NotReady"}.get(str(conditions.get("Ready")), "Unknown")
    if get_path(obj, ".spec.unschedulable"):
        state += ",SchedulingDisabled"
    labels = get_path(obj, ".metadata.labels") or {}
    prefix = "node-role.kubernetes.io/"
    roles = sorted(key[len(prefix) :] for key in labels if key.startswith(prefix))
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        _name(obj),
        state,
        ",".join(roles) or _NONE,
        _age(obj, now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP") or _NONE,
        addresses.get("ExternalIP") or _NONE,
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _deployment(obj: JsonObject, now: datetime) -> Cells:
    status = obj.get("status") or {}
    desired = int(get_path(obj, ".spec.replicas") or 0)
    return [
        _name(obj),
        f"{int(status.get('readyReplicas') or 0)}/{desired}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        _age(obj, now),
        *_containers_images(get_path(obj, ".spec.template.spec")),
        _selector(obj),
    ]


def _statefulset(obj: JsonObject, now: datetime) -> Cells:
    desired = int(get_path(obj, ".spec.replicas") or 0)
    ready = int(get_path(obj, ".status.readyReplicas") or 0)
    return [
        _name(obj),
        f"{ready}/{desired}",
        _age(obj, now),
        *_containers_images(get_path(obj, ".spec.template.spec")),
    ]


def _replicaset(obj: JsonObject, now: datetime) -> Cells:
    status = obj.get("status") or {}
    return [
        _name(obj),
        int(get_path(obj, ".spec.replicas") or 0),
        int(status.get("replicas") or 0),
        int(status.get("readyReplicas") or 0),
        _age(obj, now),
        *_containers_images(get_path(obj, ".spec.template.spec")),
        _selector(obj),
    ]


def _job(obj: JsonObject, now: datetime) -> Cells:
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    state = "Running"
    ordered = (
        "Complete",
        "Failed",
        "Terminating",
        "Suspended",
        "FailureTarget",
        "SuccessCriteriaMet",
    )
    for condition in ordered:
        if condition == "Terminating" and get_path(obj, ".metadata.deletionTimestamp"):
            state = condition
            break
        if conditions.get(condition) == "True":
            state = condition
            break
    completions = get_path(obj, ".spec.completions")
    succeeded = int(status.get("succeeded") or 0)
    parallelism = int(get_path(obj, ".spec.parallelism") or 0)
    if completions is not None:
        done = f"{succeeded}/{completions}"
    else:
        done = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    started, finished = status.get("startTime"), status.get("completionTime")
    duration = ""
    if started:
        duration = human_age(started, now=parse_time(finished) if finished else now)
    return [
        _name(obj),
        state,
        done,
        duration,
        _age(obj, now),
        *_containers_images(get_path(obj, ".spec.template.spec")),
        _selector(obj),
    ]


def _namespace(obj: JsonObject, now: datetime) -> Cells:
    return [_name(obj), get_path(obj, ".status.phase") or "", _age(obj, now)]


def _configmap(obj: JsonObject, now: datetime) -> Cells:
    count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    return [_name(obj), count, _age(obj, now)]


def _service(obj: JsonObject, now: datetime) -> Cells:
    spec = obj.get("spec") or {}
    kind = str(spec.get("type") or "ClusterIP")
    external = list(spec.get("externalIPs") or [])
    if kind == "LoadBalancer":
        ingress = get_path(obj, ".status.loadBalancer.ingress") or []
        external += [i.get("ip") or i.get("hostname") or "" for i in ingress]
        shown_external = ",".join(external) or "<pending>"
    elif kind == "ExternalName":
        shown_external = str(spec.get("externalName") or _NONE)
    else:
        shown_external = ",".join(external) or _NONE
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            ports.append(f"{port.get('port')}:{port['nodePort']}/{protocol}")
        else:
            ports.append(f"{port.get('port')}/{protocol}")
    selector = spec.get("selector") or {}
    return [
        _name(obj),
        kind,
        spec.get("clusterIP") or _NONE,
        shown_external,
        ",".join(ports) or _NONE,
        _age(obj, now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or _NONE,
    ]


def _secret(obj: JsonObject, now: datetime) -> Cells:
    count = len(obj.get("data") or {}) + len(obj.get("stringData") or {})
    return [_name(obj), obj.get("type") or "Opaque", count, _age(obj, now)]


def _service_account(obj: JsonObject, now: datetime) -> Cells:
    return [_name(obj), len(obj.get("secrets") or []), _age(obj, now)]


def _lease(obj: JsonObject, now: datetime) -> Cells:
    return [_name(obj), get_path(obj, ".spec.holderIdentity") or "", _age(obj, now)]


def _autoscaler(obj: JsonObject, now: datetime) -> Cells:
    """autoscaling/v1: one CPU utilization target, shown as kube does ("cpu: 40%/80%")."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    target_ref = spec.get("scaleTargetRef") or {}
    wanted = spec.get("targetCPUUtilizationPercentage")
    targets = _NONE
    if wanted is not None:
        current = status.get("currentCPUUtilizationPercentage")
        shown = f"{current}%" if current is not None else "<unknown>"
        targets = f"cpu: {shown}/{wanted}%"
    minimum = spec.get("minReplicas")
    return [
        _name(obj),
        f"{target_ref.get('kind', '')}/{target_ref.get('name', '')}",
        targets,
        str(minimum) if minimum is not None else "<unset>",
        int(spec.get("maxReplicas") or 0),
        int(status.get("currentReplicas") or 0),
        _age(obj, now),
    ]


def _custom_resource_definition(obj: JsonObject, now: datetime) -> Cells:
    """kube 1.37's CRD columns (earlier releases print only Name and Created At)."""
    spec = obj.get("spec") or {}
    versions = [
        f"{v.get('name')}(storage)" if v.get("storage") else str(v.get("name"))
        for v in spec.get("versions") or []
        if v.get("served", True)
    ]
    names = spec.get("names") or {}
    conditions = get_path(obj, ".status.conditions") or []
    established = any(
        c.get("type") == "Established" and c.get("status") == "True" for c in conditions
    )
    return [
        _name(obj),
        spec.get("scope", ""),
        ",".join(versions),
        get_path(obj, ".metadata.creationTimestamp"),
        spec.get("group", ""),
        names.get("kind", ""),
        ",".join(names.get("shortNames") or []),
        established,
    ]


def _event(obj: JsonObject, now: datetime) -> Cells:
    first = obj.get("firstTimestamp") or obj.get("eventTime")
    last = obj.get("lastTimestamp") or first
    count = int(obj.get("count") or 0)
    series = obj.get("series")
    if isinstance(series, dict):
        last = series.get("lastObservedTime") or last
        count = int(series.get("count") or count)
    count = count or 1
    involved = obj.get("involvedObject") or {}
    target = str(involved.get("kind", "")).lower()
    if involved.get("name"):
        target = f"{target}/{involved['name']}"
    source = obj.get("source") or {}
    component = source.get("component") or obj.get("reportingComponent") or ""
    host = source.get("host") or obj.get("reportingInstance") or ""
    return [
        human_age(last, now=now),
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {host}" if host else component,
        str(obj.get("message", "")).strip(),
        human_age(first, now=now),
        count,
        _name(obj),
    ]


@dataclass(frozen=True)
class Printer:
    columns: tuple[Column, ...]
    cells: Callable[[JsonObject, datetime], Cells]


def _wide(*names: str) -> tuple[Column, ...]:
    return tuple(Column(name, priority=1) for name in names)


_EVENT_PRINTER = Printer(
    (
        Column("Last Seen"),
        Column("Type"),
        Column("Reason"),
        Column("Object"),
        Column("Subobject", priority=1),
        Column("Source", priority=1),
        Column("Message"),
        Column("First Seen", priority=1),
        Column("Count", "integer", priority=1),
        Column("Name", priority=1, format="name"),
    ),
    _event,
)


PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "Pod"): Printer(
        (
            NAME,
            Column("Ready"),
            Column("Status"),
            Column("Restarts", "integer"),
            AGE,
            *_wide("IP", "Node", "Nominated Node", "Readiness Gates"),
        ),
        _pod,
    ),
    ("", "Node"): Printer(
        (
            NAME,
            Column("Status"),
            Column("Roles"),
            AGE,
            Column("Version"),
            *_wide("Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"),
        ),
        _node,
    ),
    ("apps", "Deployment"): Printer(
        (
            NAME,
            Column("Ready"),
            Column("Up-to-date", "integer"),
            Column("Available", "integer"),
            AGE,
            *_wide("Containers", "Images", "Selector"),
        ),
        _deployment,
    ),
    ("apps", "StatefulSet"): Printer(
        (NAME, Column("Ready"), AGE, *_wide("Containers", "Images")), _statefulset
    ),
    ("apps", "ReplicaSet"): Printer(
        (
            NAME,
            Column("Desired", "integer"),
            Column("Current", "integer"),
            Column("Ready", "integer"),
            AGE,
            *_wide("Containers", "Images", "Selector"),
        ),
        _replicaset,
    ),
    ("batch", "Job"): Printer(
        (
            NAME,
            Column("Status"),
            Column("Completions"),
            Column("Duration"),
            AGE,
            *_wide("Containers", "Images", "Selector"),
        ),
        _job,
    ),
    ("", "Namespace"): Printer((NAME, Column("Status"), AGE), _namespace),
    ("", "ConfigMap"): Printer((NAME, Column("Data", "integer"), AGE), _configmap),
    ("", "Service"): Printer(
        (
            NAME,
            Column("Type"),
            Column("Cluster-IP"),
            Column("External-IP"),
            Column("Port(s)"),
            AGE,
            Column("Selector", priority=1),
        ),
        _service,
    ),
    ("", "Secret"): Printer((NAME, Column("Type"), Column("Data", "integer"), AGE), _secret),
    ("", "ServiceAccount"): Printer((NAME, Column("Secrets", "integer"), AGE), _service_account),
    ("coordination.k8s.io", "Lease"): Printer((NAME, Column("Holder"), AGE), _lease),
    ("autoscaling", "HorizontalPodAutoscaler"): Printer(
        (
            NAME,
            Column("Reference"),
            Column("Targets"),
            Column("MinPods"),
            Column("MaxPods", "integer"),
            Column("Replicas", "integer"),
            AGE,
        ),
        _autoscaler,
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): Printer(
        (
            NAME,
            Column("Scope", description="Cluster/Namespaced"),
            Column("Versions", description="Served versions"),
            Column("Created At", "date", description=AGE.description),
            Column("Group", priority=1, description="API group"),
            Column("Kind", priority=1, description="CustomResource kind"),
            Column("ShortNames", priority=1, description="Short names"),
            Column("Established", "boolean", priority=1, description="Established status"),
        ),
        _custom_resource_definition,
    ),
    ("", "Event"): _EVENT_PRINTER,
    # events.k8s.io/v1 events are stored as core/v1 events and print the same way.
    ("events.k8s.io", "Event"): _EVENT_PRINTER,
}

DEFAULT_PRINTER = Printer(
    (NAME, Column("Created At", "date", description=AGE.description)),
    lambda obj, now: [_name(obj), get_path(obj, ".metadata.creationTimestamp")],
)
