"""A ``ClusterReader`` over a JSON cluster description kept in Redis.

Lets the runtime (integration tests, benchmark, demos) run the cluster planner
without Kubernetes. ``P static_cluster`` holds::

    {"nodes": [{"name": "n1", "cpu_milli": 8000, "memory_mega": 32000, "gpu": 4}],
     "pods":  [{"node": "n1", "cpu_milli": 500, "memory_mega": 1000, "gpu": 0}],
     "jobs":  [<ElasticJob JSON>, ...]}

``pods`` are the non-elastic pods already running. Each job's
``current_replicas`` is overridden by the recording scaler's replica count
(``P recording:replicas``) when it has one, so applied scales feed back into
the next plan, as they would on a real cluster. Replicas are placed on nodes
first-fit to work out each node's idle room. A description with a
``snapshot`` (a recorded round, ``trainscaler_sim.trace.replay``) is returned exactly as
recorded: that snapshot and those jobs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.models import ClusterResource, ElasticJob, NodeResources
from scheduler_core.ports import ObservedJob


class StaticNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    cpu_milli: int = Field(default=0, ge=0)
    memory_mega: int = Field(default=0, ge=0)
    gpu: int = Field(default=0, ge=0)


class StaticPod(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    cpu_milli: int = Field(default=0, ge=0)
    memory_mega: int = Field(default=0, ge=0)
    gpu: int = Field(default=0, ge=0)


class StaticCluster(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: tuple[StaticNode, ...] = ()
    pods: tuple[StaticPod, ...] = ()
    jobs: tuple[ElasticJob, ...] = ()
    # A recorded snapshot (a replay): returned as is, and the jobs as recorded
    # (no replica overlay from the recording scaler).
    snapshot: ClusterResource | None = None


class StaticClusterReader:
    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self._redis = client
        self._prefix = prefix

    @property
    def key(self) -> str:
        return f"{self._prefix}static_cluster"

    def store(self, cluster: StaticCluster) -> None:
        self._redis.set(self.key, cluster.model_dump_json())

    def _load(self) -> StaticCluster:
        raw = self._redis.get(self.key)
        return StaticCluster.model_validate_json(raw) if raw else StaticCluster()

    def elastic_jobs(self) -> Sequence[ElasticJob]:
        cluster = self._load()
        if cluster.snapshot is not None:
            return cluster.jobs
        if not cluster.jobs:
            return ()
        # Only the described jobs' counts: the recording scaler keeps one per job it
        # ever scaled, and this is read for every schedule chunk with a new job.
        keys = [job.key for job in cluster.jobs]
        replicas = self._redis.hmget(f"{self._prefix}recording:replicas", keys)
        overrides = {k: int(v) for k, v in zip(keys, replicas, strict=True) if v is not None}
        return tuple(
            job.model_copy(update={"current_replicas": overrides[job.key]})
            if job.key in overrides
            else job
            for job in cluster.jobs
        )

    def look_up(self, jobs: Sequence[str]) -> Mapping[str, ObservedJob]:
        """``JobLookup``: the described jobs among ``jobs`` (one read), with no object."""
        wanted = set(jobs)
        cluster = self._load()
        return {j.key: ObservedJob(policy=j.policy) for j in cluster.jobs if j.key in wanted}

    def inquire(self) -> ClusterResource:
        cluster = self._load()
        if cluster.snapshot is not None:
            return cluster.snapshot
        jobs = self.elastic_jobs()
        idle: dict[str, list[int]] = {
            n.name: [n.cpu_milli, n.memory_mega, n.gpu] for n in cluster.nodes
        }
        cpu_req = mem_req = gpu_req = cpu_lim = mem_lim = gpu_lim = 0
        for pod in cluster.pods:
            _take(idle, pod.node, cpu=pod.cpu_milli, mem=pod.memory_mega, gpu=pod.gpu)
            cpu_req, mem_req, gpu_req = (
                cpu_req + pod.cpu_milli,
                mem_req + pod.memory_mega,
                gpu_req + pod.gpu,
            )
            cpu_lim, mem_lim, gpu_lim = (
                cpu_lim + pod.cpu_milli,
                mem_lim + pod.memory_mega,
                gpu_lim + pod.gpu,
            )
        for job in jobs:
            need = job.requests
            for _ in range(job.current_replicas):
                node = next(
                    (
                        name
                        for name, room in idle.items()
                        if room[0] >= need.cpu_milli
                        and room[1] >= need.memory_mega
                        and room[2] >= need.gpu
                    ),
                    None,
                )
                if node is not None:
                    _take(idle, node, cpu=need.cpu_milli, mem=need.memory_mega, gpu=need.gpu)
            n = job.current_replicas
            cpu_req += n * need.cpu_milli
            mem_req += n * need.memory_mega
            gpu_req += n * need.gpu
            cpu_lim += n * job.limits.cpu_milli
            mem_lim += n * job.limits.memory_mega
            gpu_lim += n * job.limits.gpu
        return ClusterResource(
            node_count=len(cluster.nodes),
            gpu_request=gpu_req,
            gpu_limit=gpu_lim,
            gpu_total=sum(n.gpu for n in cluster.nodes),
            cpu_request_milli=cpu_req,
            cpu_limit_milli=cpu_lim,
            cpu_total_milli=sum(n.cpu_milli for n in cluster.nodes),
            memory_request_mega=mem_req,
            memory_limit_mega=mem_lim,
            memory_total_mega=sum(n.memory_mega for n in cluster.nodes),
            nodes=NodeResources(
                nodes_cpu_idle_milli={k: max(0, v[0]) for k, v in idle.items()},
                nodes_memory_free_mega={k: max(0, v[1]) for k, v in idle.items()},
                nodes_gpu_free={k: max(0, v[2]) for k, v in idle.items()},
            ),
        )


def _take(idle: dict[str, list[int]], node: str, *, cpu: int, mem: int, gpu: int) -> None:
    if node in idle:
        room = idle[node]
        room[0] -= cpu
        room[1] -= mem
        room[2] -= gpu


def describe(cluster: StaticCluster) -> dict[str, Any]:
    """The JSON form stored in Redis (handy for tests and demos)."""
    value: dict[str, Any] = json.loads(cluster.model_dump_json())
    return value
