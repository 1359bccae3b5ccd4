"""Defaulting and validation the real apiserver applies on create and update.

Only what the typed ``kubernetes`` client models need, what controllers rely
on, and the obvious validation (names, containers, selectors) are covered.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import invalid
from .json_types import JsonObject, metadata
from .resources import ResourceType
from .selectors import selector_from_object

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kinds whose names must be DNS labels rather than subdomains.
_LABEL_NAMED = frozenset({"Namespace", "Service"})


def validate_name(resource_type: ResourceType, name: str) -> None:
    kind = resource_type.kind
    pattern, limit = (_DNS_LABEL, 63) if kind in _LABEL_NAMED else (_DNS_SUBDOMAIN, 253)
    if not name:
        raise invalid(
            kind, name, cause="metadata.name: Required value: name or generateName is required"
        )
    if len(name) > limit or not pattern.match(name):
        raise invalid(
            kind,
            name,
            cause=f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
            "name must consist of lower case alphanumeric characters, '-' or '.'",
        )


def _default_container(container: JsonObject) -> None:
    image = str(container.get("image", ""))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
    container.setdefault("imagePullPolicy", "Always" if tag == "latest" else "IfNotPresent")
    container.setdefault("resources", {})
    resources = container["resources"]
    # Requests default to limits, which is how extended resources are usually given.
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for resource, quantity in limits.items():
            requests.setdefault(resource, quantity)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def default_pod_spec(spec: JsonObject) -> None:
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(container, dict):
            _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")


def _validate_pod_spec(kind: str, name: str, *, spec: Any, path: str) -> None:
    if not isinstance(spec, dict):
        raise invalid(kind, name, cause=f"{path}: Required value")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise invalid(kind, name, cause=f"{path}.containers: Required value")
    seen: set[str] = set()
    for index, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("name"):
            raise invalid(kind, name, cause=f"{path}.containers[{index}].name: Required value")
        if not container.get("image"):
            raise invalid(kind, name, cause=f"{path}.containers[{index}].image: Required value")
        if container["name"] in seen:
            raise invalid(kind, name, cause=f"{path}.containers[{index}].name: Duplicate value")
        seen.add(container["name"])


def qos_class(spec: JsonObject) -> str:
    """BestEffort without requests/limits, Guaranteed when requests equal limits."""
    containers = spec.get("containers") or []
    resources = [container.get("resources") or {} for container in containers]
    if all(not r.get("requests") and not r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        {"cpu", "memory"} <= set(r.get("limits") or {})
        and (r.get("requests") or {}) == (r.get("limits") or {})
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _validate_template_selector(kind: str, name: str, *, spec: JsonObject) -> None:
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        raise invalid(kind, name, cause="spec.selector: Required value")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise invalid(kind, name, cause="spec.template: Required value")
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not selector_from_object(selector).matches(labels):
        raise invalid(
            kind,
            name,
            cause="spec.template.metadata.labels: Invalid value: "
            "`selector` does not match template `labels`",
        )
    _validate_pod_spec(kind, name, spec=template.get("spec"), path="spec.template.spec")


def _replicas_ok(kind: str, name: str, *, spec: JsonObject, field: str = "replicas") -> None:
    replicas = spec.get(field)
    if replicas is not None and (
        not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0
    ):
        raise invalid(
            kind,
            name,
            cause=f"spec.{field}: Invalid value: {replicas!r}: must be greater than or equal to 0",
        )


def apply_defaults(resource_type: ResourceType, obj: JsonObject) -> None:
    """Fill the defaults the real apiserver fills for the served kinds."""
    kind = resource_type.kind
    spec = obj.get("spec")
    if kind == "Pod" and isinstance(spec, dict):
        default_pod_spec(spec)
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet", "Job") and isinstance(spec, dict):
        template_spec = (spec.get("template") or {}).get("spec")
        if isinstance(template_spec, dict):
            default_pod_spec(template_spec)
            if kind == "Job":
                template_spec["restartPolicy"] = template_spec.get("restartPolicy") or "Never"
        if kind != "Job":
            spec.setdefault("replicas", 1)
        if kind == "Deployment":
            spec.setdefault(
                "strategy",
                {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
                },
            )
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        elif kind == "StatefulSet":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault(
                "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
            )
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("serviceName", "")
        elif kind == "Job":
            spec.setdefault("parallelism", 1)
            if spec.get("completions") is None and spec["parallelism"] == 1:
                spec["completions"] = 1
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("completionMode", "NonIndexed")
            spec.setdefault("suspend", False)
    elif kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    elif kind == "Service" and isinstance(spec, dict):
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif kind == "Event":
        obj.setdefault("involvedObject", {})
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")


def initial_status(resource_type: ResourceType, obj: JsonObject) -> Any:
    """The status an object starts with; None leaves what the creator sent."""
    kind = resource_type.kind
    if kind == "Pod":
        return {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
    if kind in ("StatefulSet", "ReplicaSet"):
        return {"replicas": 0, "availableReplicas": 0} if kind == "StatefulSet" else {"replicas": 0}
    if kind in ("Deployment", "Job", "Service"):
        return {"loadBalancer": {}} if kind == "Service" else {}
    if kind == "Namespace":
        return {"phase": "Active"}
    if kind == "HorizontalPodAutoscaler":
        return {"currentReplicas": 0, "desiredReplicas": 0}
    if resource_type.custom and resource_type.has_status:
        return None  # dropped on create: status is written through /status only
    return obj.get("status")


def validate(resource_type: ResourceType, obj: JsonObject) -> None:
    """422 Invalid for obviously broken objects."""
    kind = resource_type.kind
    name = str(metadata(obj).get("name", ""))
    labels = metadata(obj).get("labels")
    if labels is not None and not (
        isinstance(labels, dict) and all(isinstance(value, str) for value in labels.values())
    ):
        raise invalid(
            kind, name, cause="metadata.labels: Invalid value: label values must be strings"
        )
    spec = obj.get("spec")
    if kind == "Pod":
        _validate_pod_spec(kind, name, spec=spec, path="spec")
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        if not isinstance(spec, dict):
            raise invalid(kind, name, cause="spec: Required value")
        _replicas_ok(kind, name, spec=spec)
        _validate_template_selector(kind, name, spec=spec)
    elif kind == "Job":
        if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
            raise invalid(kind, name, cause="spec.template: Required value")
        _replicas_ok(kind, name, spec=spec, field="parallelism")
        _validate_pod_spec(kind, name, spec=spec["template"].get("spec"), path="spec.template.spec")
        restart = spec["template"]["spec"].get("restartPolicy")
        if restart not in ("Never", "OnFailure"):
            raise invalid(
                kind,
                name,
                cause=f"spec.template.spec.restartPolicy: Unsupported value: "
                f'"{restart}": supported values: "OnFailure", "Never"',
            )
    elif kind == "Event" and not obj.get("involvedObject"):
        raise invalid(kind, name, cause="involvedObject: Required value")
    elif kind in ("ConfigMap", "Secret"):
        _validate_config_keys(kind, name, obj=obj)


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _validate_config_keys(kind: str, name: str, *, obj: JsonObject) -> None:
    """ConfigMap and Secret keys are file names: IsConfigMapKey."""
    for field in ("data", "binaryData", "stringData"):
        for key in obj.get(field) or {}:
            if len(key) <= 253 and _CONFIG_KEY.match(key) and key not in (".", ".."):
                continue
            raise invalid(
                kind,
                name,
                cause=f'{field}[{key}]: Invalid value: "{key}": a valid config key must '
                "consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            )
