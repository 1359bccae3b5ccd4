"""Deployment controller: one ReplicaSet per pod template (named by its
pod-template-hash), sized to spec.replicas; older ReplicaSets scale to zero;
status aggregated from the owned ReplicaSets."""

from __future__ import annotations

import copy

from ..json_types import JsonObject
from ..operations import ApiOperations
from ..resources import ObjectRef
from .common import controller_reference, set_condition, template_hash
from .workloads import WorkloadController

_REPLICASETS = "replicasets.apps"


class DeploymentController(WorkloadController):
    plural = "deployments"
    child_storage = _REPLICASETS

    def __init__(self, operations: ApiOperations) -> None:
        super().__init__(operations)
        self.replicasets = self.operations.resource("apps", "v1", plural="replicasets")

    def _new_replicaset(
        self, deployment: JsonObject, name: str, *, pod_hash: str, revision: int
    ) -> JsonObject:
        spec = deployment["spec"]
        template = copy.deepcopy(spec["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = pod_hash
        selector = copy.deepcopy(spec["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        return {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "labels": dict(template["metadata"]["labels"]),
                "annotations": {
                    "deployment.kubernetes.io/revision": str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(spec.get("replicas", 1)),
                },
                "ownerReferences": [controller_reference(deployment)],
            },
            "spec": {
                "replicas": spec.get("replicas", 1),
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }

    def _scale(self, replicaset: JsonObject, replicas: int) -> None:
        if (replicaset.get("spec") or {}).get("replicas") == replicas:
            return

        def set_replicas(target: JsonObject) -> None:
            target["spec"]["replicas"] = replicas

        meta = replicaset["metadata"]
        self.operations.mutate(
            ObjectRef(self.replicasets, meta.get("namespace", ""), meta["name"]), set_replicas
        )

    def sync(self, obj: JsonObject) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        namespace, name = meta.get("namespace", ""), meta["name"]
        desired = int(spec.get("replicas", 1))
        pod_hash = template_hash(spec.get("template"))
        new_name = f"{name}-{pod_hash}"
        owned = self.owned(obj, _REPLICASETS)
        if not spec.get("paused"):
            new = next((rs for rs in owned if rs["metadata"]["name"] == new_name), None)
            if new is None and self.store.get(_REPLICASETS, (namespace, new_name)) is None:
                self.operations.create_stored(
                    self.replicasets,
                    self._new_replicaset(obj, new_name, pod_hash=pod_hash, revision=len(owned) + 1),
                    namespace=namespace,
                )
            elif new is not None:
                self._scale(new, desired)
            for old in owned:
                if old["metadata"]["name"] != new_name:
                    self._scale(old, 0)
        owned = self.owned(obj, _REPLICASETS)
        statuses = [rs.get("status") or {} for rs in owned]
        new_status = next(
            (rs.get("status") or {} for rs in owned if rs["metadata"]["name"] == new_name), {}
        )
        total = sum(int(s.get("replicas", 0)) for s in statuses)
        ready = sum(int(s.get("readyReplicas", 0)) for s in statuses)
        available = sum(int(s.get("availableReplicas", 0)) for s in statuses)
        updated = int(new_status.get("replicas", 0))
        status: JsonObject = {"observedGeneration": meta.get("generation", 1)}
        for key, value in (
            ("replicas", total),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", available),
            ("unavailableReplicas", max(desired - available, 0)),
        ):
            if value:
                status[key] = value
        now = self.operations.now()
        conditions = list((obj.get("status") or {}).get("conditions") or [])
        has_minimum = available >= desired - max(desired // 4, 0)
        conditions = set_condition(
            conditions,
            {
                "type": "Available",
                "status": "True" if has_minimum else "False",
                "reason": "MinimumReplicasAvailable"
                if has_minimum
                else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if has_minimum
                else "Deployment does not have minimum availability.",
                "lastUpdateTime": now,
            },
            now=now,
        )
        complete = updated == desired and available >= desired
        conditions = set_condition(
            conditions,
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                "message": f'ReplicaSet "{new_name}" has successfully progressed.'
                if complete
                else f'ReplicaSet "{new_name}" is progressing.',
                "lastUpdateTime": now,
            },
            now=now,
        )
        status["conditions"] = conditions
        self.write_status(obj, status)
