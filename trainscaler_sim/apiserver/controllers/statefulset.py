"""StatefulSet controller: pods named <set>-<ordinal>; OrderedReady creates one
ordinal at a time after the previous is Ready, Parallel creates all; scaling
down removes the highest ordinals first."""

from __future__ import annotations

from ..json_types import JsonObject
from .common import is_active, is_ready, pod_from_template, template_hash
from .workloads import WorkloadController


def _ordinal(set_name: str, pod_name: str) -> int | None:
    prefix = f"{set_name}-"
    suffix = pod_name[len(prefix) :] if pod_name.startswith(prefix) else ""
    return int(suffix) if suffix.isdigit() else None


class StatefulSetController(WorkloadController):
    plural = "statefulsets"

    def sync(self, obj: JsonObject) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        namespace, name = meta.get("namespace", ""), meta["name"]
        desired = int(spec.get("replicas", 1))
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        template = spec.get("template") or {}
        revision = f"{name}-{template_hash(template)}"
        pods: dict[int, JsonObject] = {}
        for pod in self.owned(obj, "pods"):
            ordinal = _ordinal(name, pod["metadata"]["name"])
            if ordinal is not None:
                pods[ordinal] = pod
        for ordinal in range(desired):
            existing = pods.get(ordinal)
            if existing is None:
                pod_name = f"{name}-{ordinal}"
                if self.store.get("pods", (namespace, pod_name)) is not None:
                    break  # a foreign pod holds the name; upstream waits too
                created = pod_from_template(
                    obj,
                    template,
                    name=pod_name,
                    extra_labels={
                        "statefulset.kubernetes.io/pod-name": pod_name,
                        "controller-revision-hash": revision,
                        "apps.kubernetes.io/pod-index": str(ordinal),
                    },
                )
                created["spec"]["hostname"] = pod_name
                if spec.get("serviceName"):
                    created["spec"]["subdomain"] = spec["serviceName"]
                pods[ordinal] = self.create_pod(namespace, created)
                if ordered:
                    break
            elif ordered and not (is_active(existing) and is_ready(existing)):
                break
        for ordinal in sorted((o for o in pods if o >= desired), reverse=True):
            self.delete_pod(pods.pop(ordinal))
            if ordered:
                break
        current = [pod for pod in self.owned(obj, "pods") if is_active(pod)]
        ready = sum(1 for pod in current if is_ready(pod))
        status: JsonObject = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(current),
            "availableReplicas": ready,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        if ready:
            status["readyReplicas"] = ready
        if current:
            status["currentReplicas"] = len(current)
            status["updatedReplicas"] = len(current)
        self.write_status(obj, status)
