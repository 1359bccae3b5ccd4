"""Policy ``static``: a plain Kubernetes cluster, as a baseline.

Each job gets the replicas it asked for (``default_parallelism``), all at
once, and is never resized. Waiting jobs start in arrival order; a later job
that fits the free GPUs starts ahead of an earlier one that does not
(backfill). Arrival is the time of the job's first-contact report (a report
without an epoch time), else the round the policy first saw the job.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scheduler_core.models import Reason, ScalingDecision, ScalingPlan
from scheduler_core.policies.base import LoadCap, PolicyInput, PolicyResult, PolicyState


class StaticParams(LoadCap):
    """Only the load cap: GPUs in use never pass ``max_load_desired`` x total."""


class StaticState(PolicyState):
    """Arrival time per job still known to the cluster."""

    arrivals: dict[str, float] = Field(default_factory=dict)


class StaticPolicy:
    name: ClassVar[str] = "static"
    params_type = StaticParams
    state_type = StaticState

    def decide(
        self, request: PolicyInput, state: StaticState, *, params: StaticParams
    ) -> PolicyResult[StaticState]:
        arrivals = _arrivals(request, state)
        cluster = request.cluster
        cap = int(cluster.gpu_total * params.max_load_desired)
        in_use = sum(job.gpus_at(job.current_replicas) for job in request.jobs if job.started)
        free = min(sum(cluster.nodes.nodes_gpu_free.values()), cap - in_use)
        decisions: list[ScalingDecision] = []
        order = sorted(request.jobs, key=lambda j: (arrivals[j.key], j.key))
        for rank, job in enumerate(order):
            wanted = job.clamp(job.default_parallelism)
            numbers: dict[str, float | int | str | None] = {
                "rank": rank,
                "requested": wanted,
                "free_gpus": free,
            }
            if job.paused or job.started:
                # Static: a started job keeps its size until it ends.
                target, rule = job.current_replicas, "static.keep"
                message = f"running with {job.current_replicas}: never resized"
            elif job.gpus_at(wanted) <= free:
                target, rule = wanted, "static.start"
                message = f"starts with its {wanted} requested replicas ({free} GPUs free)"
                free -= job.gpus_at(wanted)
            else:
                target, rule = 0, "static.wait"
                message = f"waits: needs {job.gpus_at(wanted)} GPUs, {free} free (later jobs may backfill)"
            decisions.append(
                ScalingDecision(
                    job=job.key,
                    current=job.current_replicas,
                    target=target,
                    reason=Reason(rule=rule, message=message, numbers=numbers),
                )
            )
        plan = ScalingPlan(policy=self.name, decisions=tuple(decisions))
        return PolicyResult(plan=plan, state=StaticState(arrivals=arrivals))

    def forget(self, state: StaticState, job: str) -> StaticState:
        return StaticState(arrivals={k: v for k, v in state.arrivals.items() if k != job})


def _arrivals(request: PolicyInput, state: StaticState) -> dict[str, float]:
    """Arrival per current job; jobs that left the cluster are dropped."""
    first_contact = {r.job: r.at for r in request.reports if r.epoch_time_s is None}
    arrivals: dict[str, float] = {}
    for job in request.jobs:
        known = state.arrivals.get(job.key)
        arrivals[job.key] = known if known is not None else first_contact.get(job.key, request.now)
    return arrivals
