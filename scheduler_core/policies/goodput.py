"""Policy ``goodput``: shortest estimated remaining time first, each job at its efficient size.

How another program drives it
-----------------------------
Build, every scheduling round (e.g. every 60 s):

* one :class:`~scheduler_core.models.ElasticJob` per job still in the cluster:
  ``current_replicas`` = the replicas the job has (running or pending),
  ``phase`` = ``Running`` when some replica runs (else ``Pending``),
  ``min_replicas``/``max_replicas`` its bounds, ``default_parallelism`` the
  replicas the user asked for, ``application`` an identity shared by jobs
  expected to scale alike (program and batch size; optional, it lets a new
  job start from what earlier jobs measured), ``requests``/``limits`` with
  ``gpu`` per replica;
* a :class:`~scheduler_core.models.ClusterResource` with ``gpu_total``,
  ``node_count`` and ``nodes.nodes_gpu_free`` (free GPUs per node);
* the :class:`~scheduler_core.models.EpochReport` s that arrived since the
  last round, in time order: a first contact when a job is submitted
  (``epoch_time_s=None``, ``total_epochs=N``, ``at`` = submission time), then
  one per finished epoch with ``replicas``, ``epoch_time_s`` (seconds spent
  training in that epoch, not counting restarts), ``epoch`` k,
  ``total_epochs`` N, ``iterations`` done in that epoch (optional, better
  than epochs as a unit of work), ``nodes`` and ``at``;

then call ``scheduler_core.registry.decide("goodput", PolicyInput(jobs=...,
cluster=..., reports=..., now=...), state=previous_state, params=...)``. The
result's ``plan.targets()`` maps each job key to its replica count (0 =
hold no replicas); ``plan.decisions`` carry the reasons; keep
``result.state`` (JSON: ``state.model_dump_json()``) for the next round.

What it decides
---------------
* **Curves.** Seconds per unit of work (iterations when reported) at each
  replica count, learned from the job's clean reports and from earlier jobs
  of the same application (``scheduler_core.curves``). A curve that still
  scales at its largest measured count is probed at twice that count when
  the predicted saving pays for the restart.
* **Remaining time** R(n) = remaining units x seconds per unit at n.
  Remaining units come from the application's measured total (an earlier job
  of it finished), else from (N - k) x the last epoch's units.
* **Order.** Jobs by R at their efficient size, shortest first, minus
  ``aging`` x seconds spent waiting (so every wait is bounded). A job with no
  estimate (no curve yet, or no epoch count N) is ranked at
  ``unknown_remaining_s`` and admitted only into GPUs that are free now, never
  by preempting.
* **Size.** Each job in turn gets its efficient size: the largest measured n
  with speedup(n)/n >= ``efficiency_threshold`` (or the probe), as far as GPUs
  last. A running job keeps its size unless the change is forced (GPUs go to
  higher-ranked jobs) or the predicted saving beats ``hold_factor`` x
  ``restart_s`` (and ``hold_fraction`` of its remaining time).
* **Leftovers** go, a chunk at a time, to the job whose remaining time drops
  most per added GPU, under the same hold rule.
* GPUs in use never pass ``max_load_desired`` x ``gpu_total``; targets stay
  within [min, max]; paused jobs are untouched. The placement itself (fewest
  nodes) is left to the runtime.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.curves import Curve, CurvePoint, add_point, packed_nodes
from scheduler_core.models import (
    ElasticJob,
    EpochReport,
    JobPhase,
    Reason,
    ScalingDecision,
    ScalingPlan,
)
from scheduler_core.policies.base import LoadCap, PolicyInput, PolicyResult, PolicyState


class GoodputParams(LoadCap):
    efficiency_threshold: float = Field(default=0.8, gt=0, le=1)
    restart_s: float = Field(default=30.0, ge=0)
    hold_factor: float = Field(default=2.0, ge=0)
    hold_fraction: float = Field(default=0.05, ge=0)
    aging: float = Field(default=0.1, ge=0)
    unknown_remaining_s: float = Field(default=3600.0, gt=0)
    history: int = Field(default=8, ge=1)
    max_applications: int = Field(default=256, ge=1)


class GoodputJob(BaseModel):
    """What the policy remembers of one job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    application: str | None = None
    arrival: float = 0.0
    total_epochs: int | None = None
    epochs_done: int = 0
    units_done: float = 0.0
    last_epoch_units: float | None = None
    # When the policy last changed the job's size (its epochs before are mixed).
    last_change: float | None = None
    size: int = 0
    waited_s: float = 0.0
    attained_gpu_s: float = 0.0
    points: list[CurvePoint] = Field(default_factory=list)


class GoodputApp(BaseModel):
    """What jobs of one application measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    points: list[CurvePoint] = Field(default_factory=list)
    total_units: float | None = None
    epoch_units: float | None = None
    last_used: float = 0.0


class GoodputState(PolicyState):
    jobs: dict[str, GoodputJob] = Field(default_factory=dict)
    apps: dict[str, GoodputApp] = Field(default_factory=dict)
    last_now: float | None = None


@dataclass
class _Plan:
    """One job's numbers while the plan is built."""

    job: ElasticJob
    book: GoodputJob
    running: int
    curve: Curve | None
    remaining_units: float | None
    efficient: int
    want: int
    probe: bool
    rank_s: float
    alloc: int = 0
    rank: int = 0

    @property
    def known(self) -> bool:
        return self.curve is not None and self.remaining_units is not None

    def remaining_s(self, replicas: int) -> float:
        if self.curve is None or self.remaining_units is None or replicas <= 0:
            return math.inf
        return self.remaining_units * self.curve.unit_time(replicas)


class GoodputPolicy:
    name: ClassVar[str] = "goodput"
    params_type = GoodputParams
    state_type = GoodputState

    def decide(
        self, request: PolicyInput, state: GoodputState, params: GoodputParams
    ) -> PolicyResult[GoodputState]:
        cluster = request.cluster
        gpus_per_node = cluster.gpu_total // cluster.node_count if cluster.node_count else 1
        jobs_by_key = {job.key: job for job in request.jobs}
        books, apps = _ingest(request, state, params, jobs_by_key, gpus_per_node)
        books = _account(request, state, books)
        plans = [_estimate(job, books[job.key], apps, params) for job in request.jobs]
        budget = math.floor(cluster.gpu_total * params.max_load_desired)
        free_now = sum(cluster.nodes.nodes_gpu_free.values())
        _allocate(plans, budget, free_now, params)
        decisions = []
        for plan in plans:
            decision, book = _decision(plan, params, request.now)
            decisions.append(decision)
            books[plan.job.key] = book
        plan_out = ScalingPlan(policy=self.name, decisions=tuple(sorted(decisions, key=lambda d: d.job)))
        new_state = GoodputState.model_construct(jobs=books, apps=apps, last_now=request.now)
        return PolicyResult(plan=plan_out, state=new_state)

    def forget(self, state: GoodputState, job: str) -> GoodputState:
        return GoodputState.model_construct(
            jobs={k: v for k, v in state.jobs.items() if k != job},
            apps=state.apps,
            last_now=state.last_now,
        )


# --- learning from reports ---------------------------------------------------------


def _ingest(
    request: PolicyInput,
    state: GoodputState,
    params: GoodputParams,
    jobs_by_key: dict[str, ElasticJob],
    gpus_per_node: int,
) -> tuple[dict[str, GoodputJob], dict[str, GoodputApp]]:
    books = dict(state.jobs)
    apps = dict(state.apps)
    for job in request.jobs:
        if job.key not in books:
            books[job.key] = GoodputJob(application=job.application, arrival=request.now)
    for report in request.reports:
        book = books.get(report.job)
        if book is None:
            continue  # a job the policy never saw: nothing to attribute it to
        book, apps = _ingest_one(report, book, apps, params, gpus_per_node, request.now)
        books[report.job] = book
    # Jobs no longer in the cluster are forgotten once their last reports are in.
    books = {k: v for k, v in books.items() if k in jobs_by_key}
    if len(apps) > params.max_applications:
        keep = sorted(apps.items(), key=lambda kv: -kv[1].last_used)[: params.max_applications]
        apps = dict(keep)
    return books, apps


def _ingest_one(
    report: EpochReport,
    book: GoodputJob,
    apps: dict[str, GoodputApp],
    params: GoodputParams,
    gpus_per_node: int,
    now: float,
) -> tuple[GoodputJob, dict[str, GoodputApp]]:
    total = report.total_epochs if report.total_epochs is not None else book.total_epochs
    if report.epoch_time_s is None:
        # First contact: the submission time and the epoch count.
        update: dict[str, object] = {"total_epochs": total}
        if book.epochs_done == 0 and book.units_done == 0:
            update["arrival"] = min(book.arrival, report.at)
        return book.model_copy(update=update), apps
    units = float(report.iterations) if report.iterations else 1.0
    epochs_done = report.epoch if report.epoch is not None else book.epochs_done + 1
    units_done = book.units_done + units
    points = book.points
    app_key = book.application
    app = apps.get(app_key) if app_key is not None else None
    app_points = app.points if app is not None else []
    # A clean epoch ran wholly at one size: it began after the last restart.
    began = report.at - report.epoch_time_s
    clean = book.last_change is None or began >= book.last_change + params.restart_s - 1e-6
    packed = report.nodes is None or report.nodes == packed_nodes(report.replicas, gpus_per_node)
    if clean and packed and report.replicas > 0:
        seconds = report.epoch_time_s / units
        points = add_point(points, report.replicas, seconds, limit=params.history)
        app_points = add_point(app_points, report.replicas, seconds, limit=params.history)
    if app_key is not None:
        old = app or GoodputApp()
        epoch_units = units if old.epoch_units is None else 0.8 * old.epoch_units + 0.2 * units
        total_units = old.total_units
        if total is not None and epochs_done >= total:
            # The job finished: its application's total work is now measured.
            total_units = units_done if total_units is None else 0.5 * (total_units + units_done)
        apps = {
            **apps,
            app_key: GoodputApp(
                points=app_points, total_units=total_units, epoch_units=epoch_units, last_used=now
            ),
        }
    new_book = book.model_copy(
        update={
            "total_epochs": total,
            "epochs_done": epochs_done,
            "units_done": units_done,
            "last_epoch_units": units,
            "points": points,
        }
    )
    return new_book, apps


def _account(
    request: PolicyInput, state: GoodputState, books: dict[str, GoodputJob]
) -> dict[str, GoodputJob]:
    """Seconds waited and GPU-seconds attained since the last round."""
    out: dict[str, GoodputJob] = {}
    for job in request.jobs:
        book = books[job.key]
        since = book.arrival if state.last_now is None else max(state.last_now, book.arrival)
        elapsed = max(0.0, request.now - since)
        if _running(job):
            book = book.model_copy(
                update={"attained_gpu_s": book.attained_gpu_s + elapsed * job.current_replicas}
            )
        elif elapsed > 0:
            book = book.model_copy(update={"waited_s": book.waited_s + elapsed})
        out[job.key] = book
    return out


def _running(job: ElasticJob) -> bool:
    return job.phase == JobPhase.RUNNING and job.current_replicas > 0


# --- estimating --------------------------------------------------------------------


def _estimate(
    job: ElasticJob, book: GoodputJob, apps: dict[str, GoodputApp], params: GoodputParams
) -> _Plan:
    app = apps.get(book.application) if book.application is not None else None
    layers = [app.points if app is not None else [], book.points]
    curve: Curve | None = Curve.from_points(layers, threshold=params.efficiency_threshold)
    if curve is not None and not curve.known:
        curve = None
    remaining = _remaining_units(book, app)
    running = job.current_replicas if _running(job) else 0
    requested = job.clamp(job.default_parallelism)
    if curve is None or remaining is None:
        # Nothing known: its requested size, ranked by a prior, only into free GPUs.
        rank_s = params.unknown_remaining_s - params.aging * book.waited_s
        return _Plan(job, book, running, None, None, requested, requested, False, rank_s)
    efficient, probe = curve.efficient_size(job.max_replicas)
    efficient = job.clamp(efficient)
    want = efficient
    if probe:
        want = job.clamp(2 * efficient)
    plan = _Plan(job, book, running, curve, remaining, efficient, want, probe, 0.0)
    plan.rank_s = plan.remaining_s(efficient) - params.aging * book.waited_s
    return plan


def _remaining_units(book: GoodputJob, app: GoodputApp | None) -> float | None:
    if book.total_epochs is None:
        return None  # ranked by attained service instead (Tiresias-like)
    if app is not None and app.total_units is not None and app.total_units > book.units_done:
        return app.total_units - book.units_done
    left_epochs = max(book.total_epochs - book.epochs_done, 0)
    per_epoch = book.last_epoch_units or (app.epoch_units if app is not None else None)
    if per_epoch is None:
        return None
    return max(left_epochs * per_epoch, 1.0)


# --- allocating --------------------------------------------------------------------


def _worth(plan: _Plan, size: int, params: GoodputParams) -> bool:
    """Hold rule: resizing a running job must save more than a restart, with margin."""
    if plan.running == 0 or size == plan.running:
        return True
    before, after = plan.remaining_s(plan.running), plan.remaining_s(size)
    saving = before - after
    return saving > max(params.hold_factor * params.restart_s, params.hold_fraction * before)


def _allocate(plans: list[_Plan], budget: int, free_now: int, params: GoodputParams) -> None:
    for plan in plans:
        if plan.job.paused:
            plan.alloc = plan.running
            budget -= plan.running
    order = sorted(
        (p for p in plans if not p.job.paused),
        key=lambda p: (p.rank_s, p.book.arrival, p.job.key),
    )
    # Free GPUs that no job holds now: the only room an unknown job may take.
    unclaimed = free_now
    for rank, plan in enumerate(order):
        plan.rank = rank
        want = plan.want
        if plan.running and not plan.known:
            want = plan.running
        elif plan.running and want != plan.running and not _worth(plan, want, params):
            want = plan.running
        if not plan.known:
            size = min(want, budget, plan.running + unclaimed)
        else:
            size = min(want, budget)
        if size < plan.job.min_replicas:
            size = 0
        plan.alloc = size
        budget -= size
        unclaimed -= max(0, size - plan.running)
        unclaimed = max(unclaimed, 0)
    _share_leftovers(order, budget, params)


def _share_leftovers(order: list[_Plan], left: int, params: GoodputParams) -> None:
    """Leftover GPUs, a chunk at a time, to the largest remaining-time drop per GPU."""
    while left > 0:
        best: tuple[float, int, _Plan] | None = None
        for plan in order:
            if not plan.known or plan.alloc <= 0 or plan.alloc >= plan.job.max_replicas:
                continue
            now_s = plan.remaining_s(plan.alloc)
            top = min(plan.job.max_replicas, plan.alloc + left)
            for size in range(plan.alloc + 1, top + 1):
                gain = now_s - plan.remaining_s(size)
                if gain <= 0:
                    continue
                if plan.running and plan.alloc == plan.running and not _worth(plan, size, params):
                    continue
                per_gpu = gain / (size - plan.alloc)
                if best is None or per_gpu > best[0]:
                    best = (per_gpu, size, plan)
        if best is None:
            return
        _, size, plan = best
        left -= size - plan.alloc
        plan.alloc = size


# --- explaining --------------------------------------------------------------------


def _decision(plan: _Plan, params: GoodputParams, now: float) -> tuple[ScalingDecision, GoodputJob]:
    job, target = plan.job, plan.alloc
    remaining_now = plan.remaining_s(target) if target > 0 else plan.remaining_s(plan.efficient)
    numbers: dict[str, float | int | str | None] = {
        "rank": plan.rank,
        "rank_s": _round(plan.rank_s),
        "estimated_remaining_s": _round(remaining_now),
        "efficient_size": plan.efficient,
        "efficiency_threshold": params.efficiency_threshold,
        "efficiency_at_target": (
            _round(plan.curve.efficiency(target)) if plan.curve is not None and target > 0 else None
        ),
        "waited_s": _round(plan.book.waited_s),
        "probe": int(plan.probe),
    }
    if job.paused:
        rule, message = "goodput.paused", "paused: untouched"
    elif not plan.known:
        rule = "goodput.unknown"
        message = f"no estimate yet: {target} replicas into free GPUs (rank {plan.rank})"
    elif target == plan.running:
        rule = "goodput.keep" if target else "goodput.wait"
        message = f"rank {plan.rank}: {'keeps' if target else 'waits at'} {target}"
    elif plan.running == 0:
        rule = "goodput.start"
        message = f"rank {plan.rank}: starts with {target} (efficient size {plan.efficient})"
    elif target == 0:
        rule = "goodput.preempt"
        message = f"rank {plan.rank}: preempted for shorter jobs"
    elif target > plan.running:
        rule = "goodput.grow"
        message = f"rank {plan.rank}: grows {plan.running} -> {target}, saving beats the restart"
    else:
        rule = "goodput.shrink"
        message = f"rank {plan.rank}: shrinks {plan.running} -> {target}, GPUs go to shorter jobs"
    if plan.known and target > 0:
        message += f"; estimated remaining {remaining_now:.0f}s"
    decision = ScalingDecision(
        job=job.key,
        current=job.current_replicas,
        target=target,
        reason=Reason(rule=rule, message=message, numbers=numbers),
    )
    book = plan.book
    if target != plan.running:
        book = book.model_copy(update={"last_change": now, "size": target})
    return decision, book


def _round(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else round(value, 3)
