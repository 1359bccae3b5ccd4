"""A literal port of EDL's planner loop, kept only as the benchmark's yardstick.

Same fixed semantics as ``scheduler_core.policies.edl`` (consistent caps, GPU
in the node fit, best-fit node choice, full tie-break), but the reference's
loop structure: every round re-sorts every candidate with EDL's ``Less``
comparison (Go's ``sort.Sort``) and dry-runs each in both directions, and
each node search scans every node. ``bench/planner.py`` checks that both give
identical plans and reports how much faster the production planner is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cmp_to_key

from scheduler_core.models import ClusterResource, ElasticJob
from scheduler_core.policies.edl import candidates, load_cap


@dataclass
class _Resource:
    """EDL ``ClusterResource`` as the Go code mutates it."""

    cpu_request: int
    mem_request: int
    gpu_limit: int
    mem_total: int
    cpu_cap: int
    mem_cap: int
    gpu_cap: int
    cpu_idle: dict[str, int]
    mem_free: dict[str, int]
    gpu_free: dict[str, int]


def literal_plan(
    jobs: tuple[ElasticJob, ...], cluster: ClusterResource, *, max_load_desired: float
) -> dict[str, tuple[int, dict[str, int]]]:
    """Job key -> (target replicas, assumed placements), EDL's loop structure."""
    nodes = cluster.nodes
    r = _Resource(
        cpu_request=cluster.cpu_request_milli,
        mem_request=cluster.memory_request_mega,
        gpu_limit=cluster.gpu_limit,
        mem_total=cluster.memory_total_mega,
        cpu_cap=load_cap(cluster.cpu_total_milli, max_load_desired),
        mem_cap=load_cap(cluster.memory_total_mega, max_load_desired),
        gpu_cap=load_cap(cluster.gpu_total, max_load_desired),
        cpu_idle=dict(nodes.nodes_cpu_idle_milli),
        mem_free={n: nodes.nodes_memory_free_mega.get(n, 0) for n in nodes.nodes_cpu_idle_milli},
        gpu_free={n: nodes.nodes_gpu_free.get(n, 0) for n in nodes.nodes_cpu_idle_milli},
    )
    chosen = candidates(jobs)
    diff = {job.key: 0 for job in chosen}
    placements: dict[str, dict[str, int]] = {job.key: {} for job in chosen}

    def less(a: ElasticJob, b: ElasticJob) -> int:
        """EDL ``trainingjobList.Less`` (as a cmp for ``sort``), with the fixed tie-break."""
        score_a = a.fulfillment_at(a.current_replicas + diff[a.key])
        score_b = b.fulfillment_at(b.current_replicas + diff[b.key])
        if score_a != score_b:
            return -1 if score_a < score_b else 1
        for left, right in (
            (a.limits.gpu, b.limits.gpu),
            (a.requests.cpu_milli, b.requests.cpu_milli),
            (a.requests.memory_mega, b.requests.memory_mega),
        ):
            if left != right:
                return -1 if left < right else 1
        return -1 if a.key < b.key else (1 if a.key > b.key else 0)

    while True:
        no_change = True
        # EDL: sortedJobs() filters and sort.Sort()s every candidate every round.
        ordered = sorted(chosen, key=cmp_to_key(less))
        for job in ordered:
            additional = _dry_run_up(r, job, cur_diff=diff[job.key], placed=placements[job.key])
            diff[job.key] += additional
            no_change = no_change and additional == 0
        for job in reversed(ordered):
            additional = _dry_run_down(r, job, cur_diff=diff[job.key])
            diff[job.key] += additional
            no_change = no_change and additional == 0
        if no_change:
            break
    return {
        job.key: (job.current_replicas + diff[job.key], dict(sorted(placements[job.key].items())))
        for job in chosen
    }


def _search_assignable_node(r: _Resource, cpu: int, *, mem: int, gpu: int) -> str:
    best: tuple[int, int, int, str] | None = None
    for name, idle in r.cpu_idle.items():
        if cpu <= idle and mem <= r.mem_free[name] and gpu <= r.gpu_free[name]:
            key = (r.gpu_free[name], idle, r.mem_free[name], name)
            if best is None or key < best:
                best = key
    return "" if best is None else best[3]


def _adjust(r: _Resource, job: ElasticJob, *, additional: int) -> None:
    r.gpu_limit += job.limits.gpu * additional
    r.cpu_request += job.requests.cpu_milli * additional
    r.mem_request += job.requests.memory_mega * additional


def _dry_run_up(r: _Resource, job: ElasticJob, *, cur_diff: int, placed: dict[str, int]) -> int:
    cpu, mem, gpu_limit = job.requests.cpu_milli, job.requests.memory_mega, job.limits.gpu
    gpu_need = max(job.requests.gpu, gpu_limit)
    planned = job.current_replicas + cur_diff
    if planned >= job.max_replicas:
        additional = job.max_replicas - planned
        _adjust(r, job, additional=additional)
        return additional
    if r.mem_total - r.mem_request <= mem:
        return 0
    if mem > 0 and r.mem_request + mem > r.mem_cap:
        return 0
    node = _search_assignable_node(r, cpu, mem=mem, gpu=gpu_need)
    if not node:
        return 0
    if cpu > 0 and r.cpu_request + cpu > r.cpu_cap:
        return 0
    if gpu_limit > 0 and r.gpu_limit + gpu_limit > r.gpu_cap:
        return 0
    r.cpu_idle[node] -= cpu
    r.mem_free[node] -= mem
    r.gpu_free[node] -= gpu_need
    placed[node] = placed.get(node, 0) + 1
    _adjust(r, job, additional=1)
    return 1


def _dry_run_down(r: _Resource, job: ElasticJob, *, cur_diff: int) -> int:
    planned = job.current_replicas + cur_diff
    if planned > job.max_replicas:
        _adjust(r, job, additional=-1)
        return -1
    over = (
        (job.limits.gpu > 0 and r.gpu_limit > r.gpu_cap)
        or (job.requests.cpu_milli > 0 and r.cpu_request > r.cpu_cap)
        or (job.requests.memory_mega > 0 and r.mem_request > r.mem_cap)
    )
    if over and planned > job.min_replicas:
        _adjust(r, job, additional=-1)
        return -1
    return 0
