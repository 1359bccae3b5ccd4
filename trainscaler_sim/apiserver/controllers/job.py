"""Job controller: runs ``spec.parallelism`` pods (bounded by the completions
still needed), counts succeeded/failed pods, and marks the job Complete or
Failed (past ``backoffLimit``)."""

from __future__ import annotations

from ..json_types import JsonObject
from .common import is_active, is_ready, pod_from_template, set_condition
from .workloads import WorkloadController


class JobController(WorkloadController):
    group = "batch"
    plural = "jobs"

    def sync(self, obj: JsonObject) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        namespace, name = meta.get("namespace", ""), meta["name"]
        old_status = obj.get("status") or {}
        pods = self.owned(obj, "pods")
        active = [pod for pod in pods if is_active(pod)]
        phases = [(pod.get("status") or {}).get("phase") for pod in pods]
        succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in old_status.get("conditions") or []
        )
        complete = (
            (succeeded >= int(completions))
            if completions is not None
            else (succeeded > 0 and not active)
        )
        failed_out = failed > int(spec.get("backoffLimit", 6))
        if finished or complete or failed_out or spec.get("suspend"):
            wanted = 0
        elif completions is not None:
            wanted = max(min(parallelism, int(completions) - succeeded), 0)
        else:
            wanted = 0 if succeeded > 0 else parallelism
        template = spec.get("template") or {}
        if len(active) < wanted:
            for _ in range(wanted - len(active)):
                self.create_pod(
                    namespace, pod_from_template(obj, template, generate_name=f"{name}-")
                )
        elif len(active) > wanted:
            ordered = sorted(
                active,
                key=lambda pod: (
                    -self.store.creation_order("pods", (namespace, pod["metadata"]["name"]))
                ),
            )
            for pod in ordered[: len(active) - wanted]:
                self.delete_pod(pod)
        active = [pod for pod in self.owned(obj, "pods") if is_active(pod)]
        now = self.operations.now()
        status: JsonObject = {
            "ready": sum(1 for pod in active if is_ready(pod)),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
        if old_status.get("startTime") or not spec.get("suspend"):
            status["startTime"] = old_status.get("startTime") or now
        for key, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if value:
                status[key] = value
        conditions = list(old_status.get("conditions") or [])
        if complete and not active:
            conditions = set_condition(
                conditions, {"type": "Complete", "status": "True", "lastProbeTime": now}, now=now
            )
            status["completionTime"] = old_status.get("completionTime") or now
        elif failed_out:
            conditions = set_condition(
                conditions,
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": now,
                },
                now=now,
            )
        if conditions:
            status["conditions"] = conditions
        self.write_status(obj, status)
