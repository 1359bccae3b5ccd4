"""The discrete-time cluster simulator.

Every ``interval_s`` seconds the simulator hands the chosen policy what a
production worker would see (the elastic jobs, the cluster snapshot and the
epoch reports that arrived since the last round), through exactly
``scheduler_core.registry.decide``, and applies the returned targets: each
job's replica count becomes the target (replicas that do not fit stay pending,
as Kubernetes pods do), placed by ``trainscaler_sim.trace.packing``. Between rounds jobs
train at the speed the measured traces give for their placement; every change
of a job's placement costs ``restart_s`` seconds without progress (checkpoint
and restart; the first start costs the same). A job reports after each epoch:
its replica count, the seconds it trained in that epoch, epoch k of N, the
iterations of that epoch and its node count.

The only randomness is the optional per-epoch jitter of iteration times
(``noise``), drawn from ``seed``: same seed, same result.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scheduler_core.models import (
    ClusterResource,
    ElasticJob,
    EpochReport,
    JobPhase,
    NodeResources,
    Resources,
)
from scheduler_core.policies.base import (
    PolicyInput,
    PolicyParams,
    PolicyResult,
    PolicyState,
    in_round_order,
)
from scheduler_core.registry import decide, get_policy
from trainscaler_sim.trace.packing import (
    GpuNodes,
    grow,
    grow_most_allocated,
    node_name,
    shrink,
    shrink_replicaset,
)
from trainscaler_sim.trace.results import JobResult, SimResult
from trainscaler_sim.trace.traces import ApplicationTrace
from trainscaler_sim.trace.workload import WorkloadJob

NAMESPACE = "sim"
# Simulation parameters the policies get unless the caller overrides them:
# EDL may use the whole simulated cluster.
DEFAULT_POLICY_PARAMS: Mapping[str, Mapping[str, Any]] = {
    name: {"max_load_desired": 1.0} for name in ("edl", "static", "tiresias", "goodput")
}


@dataclass(frozen=True)
class SimConfig:
    nodes: int = 16
    gpus_per_node: int = 4
    interval_s: float = 60.0
    restart_s: float = 30.0
    seed: int = 0
    # Relative spread (log-normal sigma) of each epoch's iteration time; 0 = exact traces.
    noise: float = 0.0
    # What one replica requests besides its GPU: a node's share per GPU.
    cpu_milli_per_node: int = 32_000
    memory_mega_per_node: int = 256_000
    max_replicas_cap: int = 64
    # Give up (jobs left unfinished) after this much simulated time.
    horizon_s: float = 30 * 86_400.0
    # kube: as a cluster with deploy/kube-scheduler-config.yaml places pods;
    # ideal: the simulator's own best packing (trainscaler_sim.trace.packing).
    placement: Literal["kube", "ideal"] = "kube"

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.restart_s < 0 or self.noise < 0:
            raise ValueError("interval_s must be > 0; restart_s and noise must be >= 0")


@dataclass
class _Job:
    spec: WorkloadJob
    key: str
    epoch_ends: tuple[int, ...]
    max_replicas: int
    trace: ApplicationTrace
    desired: int = 0
    placement: dict[int, int] = field(default_factory=dict)
    # kube placement: when each of the job's pods on a node started (ReplicaSet scale-down).
    started: dict[int, list[float]] = field(default_factory=dict)
    iterations_done: float = 0.0
    epoch: int = 0
    epoch_train_s: float = 0.0
    restart_left_s: float = 0.0
    started_at: float | None = None
    completed_at: float | None = None
    rescales: int = 0
    gpu_seconds: float = 0.0
    max_gpus: int = 0
    model: ElasticJob | None = None
    iteration_s: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(self.placement.values())


def _grow_kube(job: _Job, add: int, *, nodes: GpuNodes, now: float) -> dict[int, int]:
    placement = grow_most_allocated(job.placement, add, nodes=nodes)
    for node, count in placement.items():
        job.started.setdefault(node, []).extend([now] * (count - job.placement.get(node, 0)))
    return placement


# Told after every round: simulated time, jobs finished, jobs in the workload.
ProgressFn = Callable[[float, int, int], None]
# Sees every round: the time, what the policy was given and what it returned.
ObserverFn = Callable[[float, PolicyInput, PolicyResult[Any]], None]


def simulate(
    workload: Sequence[WorkloadJob],
    traces: Mapping[str, ApplicationTrace],
    *,
    policy: str,
    params: PolicyParams | Mapping[str, Any] | None = None,
    config: SimConfig | None = None,
    workload_name: str = "workload",
    progress: ProgressFn | None = None,
    observer: ObserverFn | None = None,
) -> SimResult:
    """Replay ``workload`` on the simulated cluster under ``policy``."""
    simulation = _Simulation(
        workload,
        traces,
        policy=policy,
        params=params,
        config=config or SimConfig(),
        workload_name=workload_name,
        progress=progress,
    )
    simulation.observer = observer
    return simulation.run()


class _Simulation:
    def __init__(
        self,
        workload: Sequence[WorkloadJob],
        traces: Mapping[str, ApplicationTrace],
        *,
        policy: str,
        params: PolicyParams | Mapping[str, Any] | None,
        config: SimConfig,
        workload_name: str,
        progress: ProgressFn | None,
    ) -> None:
        get_policy(policy)  # fail early on an unknown name
        self.policy = policy
        # Mappings are laid over the simulation defaults; typed params are used as given.
        self.params: PolicyParams | Mapping[str, Any] = (
            params
            if isinstance(params, PolicyParams)
            else {**DEFAULT_POLICY_PARAMS.get(policy, {}), **(params or {})}
        )
        self.config = config
        self.workload_name = workload_name
        self.progress = progress
        self.nodes = GpuNodes(config.nodes, config.gpus_per_node)
        self.replica = Resources(
            cpu_milli=config.cpu_milli_per_node // config.gpus_per_node,
            memory_mega=config.memory_mega_per_node // config.gpus_per_node,
            gpu=1,
        )
        self.jobs = [self._job(spec, traces) for spec in workload]
        self.pending_reports: list[EpochReport] = []
        self.timeline: list[tuple[float, str, int]] = []
        self.gpu_seconds = 0.0
        self.observer: ObserverFn | None = None

    def _job(self, spec: WorkloadJob, traces: Mapping[str, ApplicationTrace]) -> _Job:
        trace = traces.get(spec.application)
        if trace is None:
            raise ValueError(f"job {spec.name}: no trace for application {spec.application!r}")
        return _Job(
            spec=spec,
            key=f"{NAMESPACE}/{spec.name}",
            epoch_ends=trace.epoch_ends(spec.batch_size),
            max_replicas=trace.max_replicas(spec.batch_size, cap=self.config.max_replicas_cap),
            trace=trace,
        )

    # --- main loop --------------------------------------------------------------

    def run(self) -> SimResult:
        started = time.perf_counter()
        config = self.config
        # Not yet arrived, in arrival order.
        waiting = sorted(self.jobs, key=lambda j: (j.spec.arrival_s, j.spec.name))
        active: list[_Job] = []
        state: PolicyState | None = None
        now = 0.0
        last_completion = 0.0
        finished = 0
        while (waiting or active) and now <= config.horizon_s:
            if not active and waiting and waiting[0].spec.arrival_s > now:
                # Nothing runs: jump to the round at or after the next arrival.
                rounds = math.ceil((waiting[0].spec.arrival_s - now) / config.interval_s)
                now += rounds * config.interval_s
            while waiting and waiting[0].spec.arrival_s <= now:
                job = waiting.pop(0)
                # Submitted like a Kubernetes job: its min replicas exist, pending.
                job.desired = 1
                job.model = None
                active.append(job)
                self.pending_reports.append(self._first_contact(job))
            if active:
                state = self._round(active, state, now=now)
            end = now + config.interval_s
            for job in active:
                self._advance(job, now, end=end)
            for job in [j for j in active if j.completed_at is not None]:
                active.remove(job)
                finished += 1
                last_completion = max(last_completion, job.completed_at or 0.0)
                self.nodes.release(job.placement)
                job.placement, job.started = {}, {}
                self.timeline.append((job.completed_at or end, job.spec.name, 0))
            now = end
            if self.progress is not None:
                self.progress(now, finished, len(self.jobs))
        first_arrival = min((j.spec.arrival_s for j in self.jobs), default=0.0)
        return SimResult(
            policy=self.policy,
            workload=self.workload_name,
            jobs=[self._result(job) for job in self.jobs],
            gpu_total=self.nodes.total,
            makespan_s=max(0.0, last_completion - first_arrival),
            gpu_seconds_allocated=self.gpu_seconds,
            wall_s=time.perf_counter() - started,
            timeline=self.timeline,
        )

    def _round(self, active: list[_Job], state: PolicyState | None, *, now: float) -> PolicyState:
        reports = in_round_order(self.pending_reports)
        self.pending_reports = []
        request = PolicyInput.model_construct(
            jobs=tuple(self._model(job) for job in active),
            cluster=self._cluster(active),
            reports=reports,
            now=now,
        )
        result = decide(self.policy, request, state=state, params=self.params)
        if self.observer is not None:
            self.observer(now, request, result)
        by_key = {job.key: job for job in active}
        hints: dict[str, Mapping[str, int]] = {}
        for decision in result.plan.decisions:
            job = by_key.get(decision.job)
            if job is not None:
                if job.desired != max(0, decision.target):
                    job.model = None
                job.desired = max(0, decision.target)
                hints[job.key] = decision.placements
        self._realize(active, hints, now=now)
        new_state: PolicyState = result.state
        return new_state

    def _realize(
        self, active: list[_Job], hints: Mapping[str, Mapping[str, int]], *, now: float
    ) -> None:
        """Make placements match the desired counts: shrinks first, then the largest grows."""
        before = {job.key: dict(job.placement) for job in active}
        kube = self.config.placement == "kube"
        for job in active:
            if job.gpus > job.desired:
                remove = job.gpus - job.desired
                job.placement = (
                    shrink_replicaset(
                        job.placement, remove, nodes=self.nodes, started=job.started, now=now
                    )
                    if kube
                    else shrink(job.placement, remove, nodes=self.nodes)
                )
        # Largest additions first (best-fit decreasing): small ones fill the gaps;
        # ties by job key. The runtime sends its scales in this order too
        # (workers/scaling.py ``apply_order``).
        growing = sorted(
            (job for job in active if job.gpus < job.desired),
            key=lambda j: (-(j.desired - j.gpus), j.key),
        )
        for job in growing:
            if self.nodes.free_total > 0:
                add = job.desired - job.gpus
                job.placement = (
                    _grow_kube(job, add, nodes=self.nodes, now=now)
                    if kube
                    else grow(job.placement, add, nodes=self.nodes, hint=hints.get(job.key))
                )
        for job in active:
            if job.placement == before[job.key]:
                continue
            self.timeline.append((now, job.spec.name, job.gpus))
            job.model = None
            if not job.placement:
                job.restart_left_s = 0.0
                continue
            job.restart_left_s = self.config.restart_s
            job.iteration_s = job.trace.iteration_time(
                tuple(job.placement.values()), job.spec.batch_size
            )
            job.max_gpus = max(job.max_gpus, job.gpus)
            if job.started_at is None:
                job.started_at = now
            else:
                job.rescales += 1

    # --- what policies see ---------------------------------------------------------

    def _first_contact(self, job: _Job) -> EpochReport:
        return EpochReport(
            job=job.key,
            replicas=0,
            epoch=0,
            total_epochs=len(job.epoch_ends),
            at=job.spec.arrival_s,
        )

    def _model(self, job: _Job) -> ElasticJob:
        if job.model is None:
            running = job.gpus > 0
            # current_replicas is the job's replica count (pods that exist,
            # running or pending), as a scale target reports it.
            job.model = ElasticJob(
                namespace=NAMESPACE,
                name=job.spec.name,
                min_replicas=1,
                max_replicas=job.max_replicas,
                current_replicas=max(job.desired, job.gpus),
                phase=JobPhase.RUNNING if running else JobPhase.PENDING,
                requests=self.replica,
                limits=self.replica,
                policy=self.policy,
                default_parallelism=min(job.spec.requested_replicas, job.max_replicas),
                all_pods_unschedulable=not running and job.desired > 0,
                application=f"{job.spec.application}/batch-{job.spec.batch_size}",
                placement={node_name(n): c for n, c in job.placement.items() if c > 0},
            )
        return job.model

    def _cluster(self, active: list[_Job]) -> ClusterResource:
        config = self.config
        # Pending replicas count in requests, as Kubernetes counts pending pods.
        requested = sum(max(job.desired, job.gpus) for job in active)
        cpu, memory = self.replica.cpu_milli, self.replica.memory_mega
        names = [node_name(i) for i in range(config.nodes)]
        free = self.nodes.free
        return ClusterResource(
            node_count=config.nodes,
            gpu_request=requested,
            gpu_limit=requested,
            gpu_total=self.nodes.total,
            cpu_request_milli=requested * cpu,
            cpu_limit_milli=requested * cpu,
            cpu_total_milli=config.nodes * config.cpu_milli_per_node,
            memory_request_mega=requested * memory,
            memory_limit_mega=requested * memory,
            memory_total_mega=config.nodes * config.memory_mega_per_node,
            nodes=NodeResources(
                nodes_cpu_idle_milli={
                    n: config.cpu_milli_per_node - (config.gpus_per_node - f) * cpu
                    for n, f in zip(names, free, strict=True)
                },
                nodes_memory_free_mega={
                    n: config.memory_mega_per_node - (config.gpus_per_node - f) * memory
                    for n, f in zip(names, free, strict=True)
                },
                nodes_gpu_free=dict(zip(names, free, strict=True)),
            ),
        )

    # --- training between rounds ------------------------------------------------------

    def _advance(self, job: _Job, start: float, *, end: float) -> None:
        gpus = job.gpus
        if gpus == 0 or job.completed_at is not None:
            return
        clock = start
        pause = min(job.restart_left_s, end - clock)
        job.restart_left_s -= pause
        clock += pause
        while clock < end:
            per_iteration = job.iteration_s * self._jitter(job)
            target = job.epoch_ends[job.epoch]
            needed = (target - job.iterations_done) * per_iteration
            if clock + needed > end:
                job.iterations_done += (end - clock) / per_iteration
                job.epoch_train_s += end - clock
                clock = end
                break
            clock += needed
            job.epoch_train_s += needed
            previous = job.epoch_ends[job.epoch - 1] if job.epoch > 0 else 0
            job.iterations_done = float(target)
            job.epoch += 1
            self.pending_reports.append(
                EpochReport(
                    job=job.key,
                    replicas=gpus,
                    epoch_time_s=max(job.epoch_train_s, 1e-9),
                    epoch=job.epoch,
                    total_epochs=len(job.epoch_ends),
                    iterations=target - previous,
                    nodes=len(job.placement),
                    at=clock,
                )
            )
            job.epoch_train_s = 0.0
            if job.epoch == len(job.epoch_ends):
                job.completed_at = clock
                break
        held_until = clock if job.completed_at is not None else end
        job.gpu_seconds += gpus * (held_until - start)
        self.gpu_seconds += gpus * (held_until - start)

    def _jitter(self, job: _Job) -> float:
        if self.config.noise <= 0:
            return 1.0
        rng = random.Random(f"{self.config.seed}:{job.spec.name}:{job.epoch}")
        return math.exp(rng.gauss(0.0, self.config.noise))

    def _result(self, job: _Job) -> JobResult:
        return JobResult(
            name=job.spec.name,
            application=job.spec.application,
            batch_size=job.spec.batch_size,
            requested_replicas=job.spec.requested_replicas,
            arrival_s=job.spec.arrival_s,
            start_s=job.started_at,
            completion_s=job.completed_at,
            rescales=job.rescales,
            gpu_seconds=job.gpu_seconds,
            max_gpus=job.max_gpus,
        )
