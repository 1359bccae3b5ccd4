"""Policy ``tiresias``: discretized two-dimensional least-attained service.

Tiresias (NSDI'19) as the Pollux study (OSDI'21) configured it:

* a job's attained service is the seconds it has run times its requested
  replicas; it moves from queue 0 to queue 1 once that reaches
  ``queue_threshold_gpu_s`` (57,600 GPU-seconds) and never moves back;
* queue 0 is served before queue 1, oldest job first within a queue;
* a job runs with exactly its requested replicas or not at all (gang); the
  plan is recomputed from scratch each round, so a job that does not fit
  beside higher-priority jobs is preempted, and a later job that fits runs;
* a job's new replicas go to the nodes with the most free GPUs (placement hint).

Arrival is the time of the job's first-contact report (a report without an
epoch time), else the round the policy first saw the job. Service accrues
between rounds for jobs that run (phase Running with replicas).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.models import JobPhase, Reason, ScalingDecision, ScalingPlan
from scheduler_core.policies.base import LoadCap, PolicyInput, PolicyResult, PolicyState

HIGH_QUEUE, LOW_QUEUE = 0, 1


class TiresiasParams(LoadCap):
    queue_threshold_gpu_s: float = Field(default=57_600.0, gt=0)


class TiresiasJob(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    arrival: float
    attained_gpu_s: float = 0.0
    queue: int = HIGH_QUEUE


class TiresiasState(PolicyState):
    jobs: dict[str, TiresiasJob] = Field(default_factory=dict)
    last_now: float | None = None


class TiresiasPolicy:
    name: ClassVar[str] = "tiresias"
    params_type = TiresiasParams
    state_type = TiresiasState

    def decide(
        self, request: PolicyInput, state: TiresiasState, *, params: TiresiasParams
    ) -> PolicyResult[TiresiasState]:
        books = _account(request, state, params=params)
        cluster = request.cluster
        budget = int(cluster.gpu_total * params.max_load_desired)
        node_free = dict(cluster.nodes.nodes_gpu_free)
        order = sorted(
            request.jobs, key=lambda j: (books[j.key].queue, books[j.key].arrival, j.key)
        )
        decisions: list[ScalingDecision] = []
        for rank, job in enumerate(order):
            book = books[job.key]
            wanted = job.clamp(job.default_parallelism)
            need = job.gpus_at(wanted)
            numbers: dict[str, float | int | str | None] = {
                "rank": rank,
                "queue": book.queue,
                "attained_gpu_s": round(book.attained_gpu_s, 3),
                "queue_threshold_gpu_s": params.queue_threshold_gpu_s,
                "requested": wanted,
                "gpus_left": budget,
            }
            placements: dict[str, int] = {}
            if job.paused:
                target, rule, message = job.current_replicas, "tiresias.paused", "paused: untouched"
                budget -= job.gpus_at(job.current_replicas)
            elif need <= budget:
                target, rule = wanted, "tiresias.run"
                message = f"queue {book.queue}, rank {rank}: runs with its {wanted} replicas"
                budget -= need
                if not job.started:
                    placements = _most_free_first(node_free, need)
            else:
                target, rule = 0, "tiresias.wait"
                message = (
                    f"queue {book.queue}, rank {rank}: needs {need} GPUs, {budget} left "
                    "after higher-priority jobs"
                )
                if job.started:
                    rule, message = "tiresias.preempt", message + ": preempted"
            decisions.append(
                ScalingDecision(
                    job=job.key,
                    current=job.current_replicas,
                    target=target,
                    reason=Reason(rule=rule, message=message, numbers=numbers),
                    placements=placements,
                )
            )
        plan = ScalingPlan(
            policy=self.name, decisions=tuple(sorted(decisions, key=lambda d: d.job))
        )
        return PolicyResult(plan=plan, state=TiresiasState(jobs=books, last_now=request.now))

    def forget(self, state: TiresiasState, job: str) -> TiresiasState:
        return TiresiasState(
            jobs={k: v for k, v in state.jobs.items() if k != job}, last_now=state.last_now
        )


def _account(
    request: PolicyInput, state: TiresiasState, *, params: TiresiasParams
) -> dict[str, TiresiasJob]:
    """Attained service and queue per current job, advanced to ``request.now``."""
    elapsed = 0.0 if state.last_now is None else max(0.0, request.now - state.last_now)
    first_contact = {r.job: r.at for r in request.reports if r.epoch_time_s is None}
    books: dict[str, TiresiasJob] = {}
    for job in request.jobs:
        book = state.jobs.get(job.key)
        if book is None:
            book = TiresiasJob(arrival=first_contact.get(job.key, request.now))
        attained = book.attained_gpu_s
        if job.phase == JobPhase.RUNNING and job.current_replicas > 0:
            # Tiresias: service = seconds run x requested replicas.
            attained += elapsed * job.clamp(job.default_parallelism)
        queue = book.queue
        if queue == HIGH_QUEUE and attained >= params.queue_threshold_gpu_s:
            queue = LOW_QUEUE  # Tiresias: demoted once, never promoted back.
        books[job.key] = TiresiasJob(arrival=book.arrival, attained_gpu_s=attained, queue=queue)
    return books


def _most_free_first(node_free: dict[str, int], count: int) -> dict[str, int]:
    """Take ``count`` GPUs from the nodes with the most free GPUs (updates ``node_free``)."""
    if sum(node_free.values()) < count:
        # Room held by preempted jobs is freed by the runtime; let it place those.
        return {}
    placements: dict[str, int] = {}
    while count > 0:
        name = min((n for n, f in node_free.items() if f > 0), key=lambda n: (-node_free[n], n))
        take = min(count, node_free[name])
        node_free[name] -= take
        placements[name] = placements.get(name, 0) + take
        count -= take
    return placements
