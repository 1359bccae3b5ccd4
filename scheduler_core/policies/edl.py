"""Policy ``edl``: PaddlePaddle EDL's cluster-fair planner, with its defects fixed.

EDL (``pkg/autoscaler``) dry-runs every elastic job in rounds until nothing
changes. Each round sorts the candidate jobs by fulfillment
``(planned - min) / (max - min)``, walks them from least to most fulfilled
trying one more replica each, then from most to least fulfilled shrinking one
replica where the cluster is over its load cap.

Fixed here, each marked ``fix:`` where it is implemented:

* ties are broken by GPU limit, CPU request, memory request, then name (the
  reference compared one job's memory with itself);
* the node fit checks GPUs as well as CPU and memory, and picks the best-fit
  node deterministically (the reference took the first node in Go map order);
* scale-up and scale-down use one cap, ``floor(max_load_desired x total)``,
  for CPU, memory and GPU alike (the reference let GPU limits grow to the
  whole cluster and then trimmed them back to the cap, forever);
* a job is shrunk for an over-cap resource only if it holds some of that
  resource, and a job that holds none of it is not blocked by it (otherwise
  a CPU-only job would shrink and regrow every round while GPUs are over cap).

The planner is fast because most work is skipped, never changed: once a job
fails to grow, it cannot grow later in the same plan unless a shrink freed
capacity, so only jobs that grew in the last round are revisited. Each
replica's node comes from ``scheduler_core.node_index`` (nodes with identical
free room form one class, and best fit is one bisect over the distinct rooms),
the grow walk keeps the cluster totals in locals, and each round's sort
compares (fulfillment, tie-break rank) pairs, the tie-break tuples having
been ranked once. The plans are the reference loop's exactly:
``bench/planner.py`` and the unit tests check them, targets and placements,
against a literal port of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar

from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    JobPhase,
    ScalingPlan,
)
from scheduler_core.node_index import NodeIndex
from scheduler_core.policies.base import EmptyState, LoadCap, PolicyInput, PolicyResult

# Why a job could not grow, in the order the checks run.
AT_MAX = "at_max"
MEMORY_FREE = "memory_free"
MEMORY_CAP = "memory_cap"
NO_NODE_FITS = "no_node_fits"
CPU_CAP = "cpu_cap"
GPU_CAP = "gpu_cap"
# Why a job shrank without a cap: planned above max_replicas.
OVER_MAX = "over_max"


class EdlParams(LoadCap):
    """EDL's options: ``WithMaxLoadDesired`` (command-line default 0.97)."""


class _Job:
    """A candidate job's numbers, flattened for the hot loop."""

    __slots__ = (
        "blocked",
        "cpu",
        "current",
        "down_rules",
        "gpu_limit",
        "gpu_need",
        "key",
        "max",
        "mem",
        "min",
        "order",
        "placements",
        "planned",
        "rank",
        "span",
        "ties",
    )

    def __init__(self, job: ElasticJob) -> None:
        requests, limits = job.requests, job.limits
        self.key = job.key
        self.min = job.min_replicas
        self.max = job.max_replicas
        self.current = self.planned = job.current_replicas
        self.cpu = requests.cpu_milli
        self.mem = requests.memory_mega
        self.gpu_limit = limits.gpu
        self.gpu_need = job.gpus_per_replica
        # EDL: only elastic jobs (min < max) are candidates; the hot loop divides by the span.
        if not job.elastic:
            raise ValueError(f"{self.key} is not elastic (min == max): not an EDL candidate")
        self.span = self.max - self.min
        self.blocked: str | None = None
        self.down_rules: list[str] = []
        self.placements: dict[str, int] = {}
        # fix: EDL compared a job's memory request with its own; compare both jobs.
        self.ties = (self.gpu_limit, self.cpu, self.mem, self.key)
        self.rank = 0  # the job's place in tie-break order, set by _rank_ties
        self.order = (0.0, 0)

    def refresh_order(self) -> None:
        """The sort key: fulfillment, then the tie-breaks (as one rank)."""
        self.order = ((self.planned - self.min) / self.span, self.rank)


@dataclass(slots=True)
class _Totals:
    """Cluster-wide requests and limits, and the caps they must stay under."""

    cpu_request: int
    mem_request: int
    gpu_limit: int
    mem_total: int
    cpu_cap: int
    mem_cap: int
    gpu_cap: int

    def over_cap_held_by(self, job: _Job) -> str | None:
        """The over-cap resource this job holds some of, if any."""
        if job.gpu_limit > 0 and self.gpu_limit > self.gpu_cap:
            return GPU_CAP
        if job.cpu > 0 and self.cpu_request > self.cpu_cap:
            return CPU_CAP
        if job.mem > 0 and self.mem_request > self.mem_cap:
            return MEMORY_CAP
        return None

    def any_over_cap(self) -> bool:
        return (
            self.gpu_limit > self.gpu_cap
            or self.cpu_request > self.cpu_cap
            or self.mem_request > self.mem_cap
        )

    def numbers(self, limit: str) -> dict[str, float | int | str | None]:
        """The cluster numbers behind a limit, for a decision's reason."""
        if limit == CPU_CAP:
            return {"cluster_cpu_request_milli": self.cpu_request, "cpu_cap_milli": self.cpu_cap}
        if limit == GPU_CAP:
            return {"cluster_gpu_limit": self.gpu_limit, "gpu_cap": self.gpu_cap}
        if limit in (MEMORY_CAP, MEMORY_FREE):
            return {
                "cluster_memory_request_mega": self.mem_request,
                "memory_cap_mega": self.mem_cap,
                "memory_total_mega": self.mem_total,
            }
        return {}

    def add(self, job: _Job, replicas: int) -> None:
        self.cpu_request += job.cpu * replicas
        self.mem_request += job.mem * replicas
        self.gpu_limit += job.gpu_limit * replicas


_ORDER = attrgetter("order")
_KEY = attrgetter("key")


def load_cap(total: int, max_load_desired: float) -> int:
    """EDL: the threshold is ``int(total x max_load_desired)`` (truncated)."""
    return math.floor(total * max_load_desired)


def candidates(jobs: tuple[ElasticJob, ...]) -> list[ElasticJob]:
    """EDL's candidate set: elastic, not paused jobs that are running, or all of
    them when some job has every pod unschedulable (EDL pending rule: then every
    job may be rescheduled to make room)."""
    have_pending = any(job.all_pods_unschedulable for job in jobs)
    return [
        job
        for job in jobs
        if job.elastic and not job.paused and (have_pending or job.phase == JobPhase.RUNNING)
    ]


class EdlPolicy:
    name: ClassVar[str] = "edl"
    params_type = EdlParams
    state_type = EmptyState

    def decide(
        self, request: PolicyInput, state: EmptyState, *, params: EdlParams
    ) -> PolicyResult[EmptyState]:
        chosen = candidates(request.jobs)
        work = _rank_ties([_Job(job) for job in chosen])
        totals = _totals(request.cluster, params.max_load_desired)
        _plan_rounds(work, totals, nodes=NodeIndex(request.cluster))
        limit_numbers = {limit: totals.numbers(limit) for limit in _LIMITS}
        decisions = [_decision(flat, limit_numbers) for flat in sorted(work, key=_KEY)]
        # One validation for the whole plan: cheaper than one model per decision.
        plan = ScalingPlan.model_validate({"policy": self.name, "decisions": decisions})
        return PolicyResult(plan=plan, state=state)


def _rank_ties(work: list[_Job]) -> list[_Job]:
    """Number the jobs in tie-break order once, so each round's sort compares
    (fulfillment, rank) rather than the whole tie-break tuple. Ranks are
    unique (the key is), so the order is the same."""
    for rank, job in enumerate(sorted(work, key=attrgetter("ties"))):
        job.rank = rank
        job.refresh_order()
    return work


def _totals(cluster: ClusterResource, max_load_desired: float) -> _Totals:
    return _Totals(
        cpu_request=cluster.cpu_request_milli,
        mem_request=cluster.memory_request_mega,
        gpu_limit=cluster.gpu_limit,
        mem_total=cluster.memory_total_mega,
        cpu_cap=load_cap(cluster.cpu_total_milli, max_load_desired),
        mem_cap=load_cap(cluster.memory_total_mega, max_load_desired),
        gpu_cap=load_cap(cluster.gpu_total, max_load_desired),
    )


def _plan_rounds(work: list[_Job], totals: _Totals, *, nodes: NodeIndex) -> None:
    """EDL ``scaleAllJobsDryRun``: rounds of grow-then-shrink until nothing changes."""
    active = work
    while active:
        # Both walks of a round use the order taken at the round's start. Growing
        # never pushes a total over its cap, so only a round that starts over a
        # cap can shrink anything, and only then is every job sorted.
        shrink_walk: list[_Job] = []
        if totals.any_over_cap():
            shrink_walk = sorted(work, key=_ORDER)
            members = {id(job) for job in active}
            ordered = [job for job in shrink_walk if id(job) in members]
        else:
            ordered = sorted(active, key=_ORDER)
        grew, freed = _grow_walk(ordered, totals, nodes=nodes)
        # Most fulfilled first.
        for job in reversed(shrink_walk):
            freed = _try_shrink(job, totals) or freed
        if not grew and not freed:
            return
        # A job that could not grow stays blocked unless a shrink freed capacity.
        active = work if freed else grew


def _grow_walk(
    ordered: list[_Job], totals: _Totals, *, nodes: NodeIndex
) -> tuple[list[_Job], bool]:
    """One grow walk, least fulfilled first (EDL ``scaleDryRun`` scale-up branch for
    each job): the jobs that grew, and whether any shrank."""
    grew: list[_Job] = []
    freed = False
    claim = nodes.claim
    # The totals live in locals for the walk (the hot loop of the planner) and are
    # written back before anything else reads them.
    cluster_cpu, cluster_mem, cluster_gpu = totals.cpu_request, totals.mem_request, totals.gpu_limit
    cpu_cap, mem_cap, gpu_cap = totals.cpu_cap, totals.mem_cap, totals.gpu_cap
    mem_total = totals.mem_total
    for job in ordered:
        if job.planned >= job.max:
            # EDL: at or over max, go straight to max without looking at resources.
            job.blocked = AT_MAX
            additional = job.max - job.planned
            if additional:
                # A shrink: lowers the totals, frees no node room (see _apply).
                job.down_rules.append(OVER_MAX)
                job.planned += additional
                job.refresh_order()
                cluster_cpu += job.cpu * additional
                cluster_mem += job.mem * additional
                cluster_gpu += job.gpu_limit * additional
                freed = True
            continue
        cpu, mem, gpu = job.cpu, job.mem, job.gpu_limit
        if mem_total - cluster_mem <= mem:
            job.blocked = MEMORY_FREE  # EDL: free memory must exceed one replica's request.
        elif mem > 0 and cluster_mem + mem > mem_cap:
            job.blocked = MEMORY_CAP  # fix: the same cap as the shrink rule.
        # The cap checks come before the node search here (EDL searched first): all
        # must pass, so the order changes only which limit the reason names.
        elif cpu > 0 and cluster_cpu + cpu > cpu_cap:
            job.blocked = CPU_CAP  # EDL: never grow CPU requests past the load cap.
        elif gpu > 0 and cluster_gpu + gpu > gpu_cap:
            job.blocked = GPU_CAP  # fix: GPUs obey the same cap as the shrink rule.
        else:
            node = claim(cpu, mem, gpu=job.gpu_need)
            if node is None:
                job.blocked = NO_NODE_FITS  # fix: a node must fit CPU, memory and GPU.
                continue
            placements = job.placements
            placements[node] = placements.get(node, 0) + 1
            job.blocked = None
            # refresh_order, inlined: this is the planner's hottest line.
            planned = job.planned = job.planned + 1
            job.order = ((planned - job.min) / job.span, job.rank)
            cluster_cpu += cpu
            cluster_mem += mem
            cluster_gpu += gpu
            grew.append(job)
    totals.cpu_request, totals.mem_request, totals.gpu_limit = cluster_cpu, cluster_mem, cluster_gpu
    return grew, freed


def _try_shrink(job: _Job, totals: _Totals) -> bool:
    """EDL ``scaleDryRun`` scale-down branch; True when the job shrank."""
    if job.planned > job.max:
        job.down_rules.append(OVER_MAX)
    else:
        resource = totals.over_cap_held_by(job)
        # EDL: never shrink below min_replicas.
        if resource is None or job.planned <= job.min:
            return False
        job.down_rules.append(resource)
    _apply(job, -1, totals=totals)
    return True


def _apply(job: _Job, additional: int, *, totals: _Totals) -> None:
    # EDL: a shrink lowers cluster totals but frees no node room in the dry run,
    # since which pod goes is not known.
    job.planned += additional
    job.refresh_order()
    totals.add(job, additional)


def _decision(
    flat: _Job, limit_numbers: dict[str, dict[str, float | int | str | None]]
) -> dict[str, object]:
    """A ``ScalingDecision``'s fields, validated with the whole plan.

    ``limit_numbers`` holds, for each limit, the final cluster numbers behind it.
    """
    current, planned, low, span = flat.current, flat.planned, flat.min, flat.span
    limited_by = flat.blocked if planned < flat.max else AT_MAX
    numbers: dict[str, float | int | str | None] = {
        "fulfillment_before": round((current - low) / span, 4),
        "fulfillment_after": round((planned - low) / span, 4),
        "min_replicas": low,
        "max_replicas": flat.max,
        "limited_by": limited_by,
    }
    if planned > current:
        rule = "edl.scale_up"
        message = f"grew {current} -> {planned}, least fulfilled first"
    elif planned < current:
        rule = "edl.scale_down"
        causes = sorted(set(flat.down_rules))
        message = f"shrank {current} -> {planned}: {', '.join(causes)} (most fulfilled first)"
        for cause in causes:
            numbers.update(limit_numbers[cause])
    else:
        rule = "edl.keep"
        message = f"kept {current}"
    if limited_by is not None and limited_by != AT_MAX:
        message += _CANNOT_GROW[limited_by]
        numbers.update(limit_numbers[limited_by])
    return {
        "job": flat.key,
        "current": current,
        "target": planned,
        "reason": {"rule": rule, "message": message, "numbers": numbers},
        "placements": flat.placements,
    }


_BLOCKED_TEXT = {
    AT_MAX: "at max_replicas",
    MEMORY_FREE: "free cluster memory does not exceed one replica's request",
    MEMORY_CAP: "memory requests would pass max_load_desired x total",
    NO_NODE_FITS: "no node has room for one more replica (CPU, memory, GPU)",
    CPU_CAP: "CPU requests would pass max_load_desired x total",
    GPU_CAP: "GPU limits would pass max_load_desired x total",
}
_CANNOT_GROW = {limit: f"; cannot grow: {text}" for limit, text in _BLOCKED_TEXT.items()}
_LIMITS = (*_BLOCKED_TEXT, OVER_MAX)
