"""ReplicaSet controller: keeps spec.replicas active pods, deleting unscheduled,
then pending, then not-ready, then newest pods first when scaling down."""

from __future__ import annotations

from ..json_types import JsonObject
from .common import is_active, is_ready, pod_from_template
from .workloads import WorkloadController

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


class ReplicaSetController(WorkloadController):
    plural = "replicasets"

    def _deletion_rank(self, pod: JsonObject) -> tuple[int, int, int, int]:
        """Upstream ActivePods ordering: cheapest pods to lose sort first."""
        meta = pod["metadata"]
        assigned = 1 if (pod.get("spec") or {}).get("nodeName") else 0
        phase = _PHASE_RANK.get((pod.get("status") or {}).get("phase", "Pending"), 0)
        ready = 1 if is_ready(pod) else 0
        order = self.store.creation_order("pods", (meta.get("namespace", ""), meta["name"]))
        return assigned, phase, ready, -order

    def sync(self, obj: JsonObject) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        namespace, name = meta.get("namespace", ""), meta["name"]
        desired = int(spec.get("replicas", 1))
        active = [pod for pod in self.owned(obj, "pods") if is_active(pod)]
        if len(active) < desired:
            template = spec.get("template") or {}
            for _ in range(desired - len(active)):
                self.create_pod(
                    namespace, pod_from_template(obj, template, generate_name=f"{name}-")
                )
        elif len(active) > desired:
            for pod in sorted(active, key=self._deletion_rank)[: len(active) - desired]:
                self.delete_pod(pod)
        active = [pod for pod in self.owned(obj, "pods") if is_active(pod)]
        ready = sum(1 for pod in active if is_ready(pod))
        status: JsonObject = {"replicas": len(active)}
        if active:
            status["fullyLabeledReplicas"] = len(active)
        if ready:
            status["readyReplicas"] = ready
            status["availableReplicas"] = ready
        status["observedGeneration"] = meta.get("generation", 1)
        self.write_status(obj, status)
