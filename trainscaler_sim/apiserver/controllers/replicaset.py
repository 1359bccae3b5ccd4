"""ReplicaSet controller: keeps spec.replicas active pods; scaling down deletes
pods in upstream's ``getPodsToDelete`` order (``pod_ranking``)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from ..json_types import JsonObject
from .common import controller_of, is_active, is_ready, pod_from_template
from .pod_ranking import RankedPod, deletion_order
from .workloads import WorkloadController

_REPLICASETS = "replicasets.apps"


def _time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _ready_since(pod: JsonObject) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


class ReplicaSetController(WorkloadController):
    plural = "replicasets"

    def _related_pods(self, replicaset: JsonObject) -> list[JsonObject]:
        """Active pods of this ReplicaSet and of its siblings (same controlling owner)."""
        owner = controller_of(replicaset)
        siblings = [replicaset]
        if owner is not None:
            for storage, key in self.store.dependents(str(owner.get("uid", ""))):
                sibling = self.store.get(storage, key) if storage == _REPLICASETS else None
                if (
                    sibling is not None
                    and sibling["metadata"]["uid"] != replicaset["metadata"]["uid"]
                ):
                    siblings.append(sibling)
        return [pod for rs in siblings for pod in self.owned(rs, "pods") if is_active(pod)]

    def _ranked(self, pod: JsonObject, on_node: Counter[str]) -> RankedPod:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        try:
            cost = int(annotations.get("controller.kubernetes.io/pod-deletion-cost", 0))
        except ValueError:
            cost = 0
        node = str(spec.get("nodeName") or "")
        return RankedPod(
            name=meta["name"],
            node=node,
            phase=str(status.get("phase") or "Pending"),
            ready=is_ready(pod),
            deletion_cost=cost,
            related_on_node=on_node[node],
            ready_since=_ready_since(pod),
            restarts=max(
                (int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or []),
                default=0,
            ),
            created=_time(meta.get("creationTimestamp")),
            created_order=self.store.creation_order(
                "pods", (meta.get("namespace", ""), meta["name"])
            ),
        )

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
            on_node = Counter(
                str((pod.get("spec") or {}).get("nodeName") or "")
                for pod in self._related_pods(obj)
            )
            by_name = {pod["metadata"]["name"]: pod for pod in active}
            ranked = [self._ranked(pod, on_node) for pod in active]
            now = _time(self.operations.now())
            for victim in deletion_order(ranked, now=now)[: len(active) - desired]:
                self.delete_pod(by_name[victim.name])
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
