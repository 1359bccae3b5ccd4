"""The simulated training jobs of the embedded system, one thread each.

Two kinds, as the issue asks for a mix:

* ``elasticjob``: a Deployment plus an ElasticJob on the cluster; the
  autoscaler scales the Deployment and the job trains with its ready
  replicas (the simulated pods);
* ``train``: a KubeML train request through ``POST /train`` with ``ps_url``
  set to the driver's parameter server, which receives the job's parallelism.

Either way, at the end of every simulated epoch the job reports through
``POST /job`` in KubeML's ``TrainTask`` shape, with the epoch time from its
curve (measured traces or synthetic) at the replicas it ran with. Wall time
is compressed: an epoch at the job's first replica count lasts
``epoch_wall_s`` seconds and other counts scale with the curve, so speed-ups
show within a short demo while the reported times stay the measured ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from trainscaler_sim.embedded.api_client import ApiCallError, TrainscalerApi
from trainscaler_sim.embedded.curves import EpochCurve
from trainscaler_sim.embedded.kube import ClusterJobs
from trainscaler_sim.embedded.parameter_server import ParallelismBoard

JobMode = Literal["elasticjob", "train"]
_POLL_SECONDS = 0.5
_MIN_WALL_S = 0.5


@dataclass(frozen=True)
class JobSpec:
    name: str
    mode: JobMode
    application: str
    batch_size: int
    min_replicas: int
    max_replicas: int
    initial_replicas: int
    epochs: int
    dataset: str = "synthetic"


# 12 GPUs of minimum replicas' worth of room to grow on 4 nodes x 4 GPUs.
DEFAULT_MIX: tuple[JobSpec, ...] = (
    JobSpec("cifar10-ej", "elasticjob", "cifar10", 512, 1, 6, 1, 100, "cifar10"),
    JobSpec("imagenet-ej", "elasticjob", "imagenet", 3200, 2, 8, 2, 90, "imagenet"),
    JobSpec("yolov3-ej", "elasticjob", "yolov3", 64, 1, 4, 1, 50, "coco"),
    JobSpec("ncf-api", "train", "ncf", 2048, 1, 4, 1, 30, "movielens"),
    JobSpec("bert-api", "train", "bert", 96, 1, 4, 2, 30, "squad"),
)


@dataclass
class JobView:
    """What the table shows of one job; copied out under the driver's lock."""

    name: str
    mode: JobMode
    application: str
    min_replicas: int
    max_replicas: int
    curve_source: str
    key: str = ""
    job_id: str = ""
    desired: int = 0
    ready: int = 0
    epoch: int = 0
    epoch_time_s: float | None = None
    scale_events: int = 0
    # Epochs abandoned because the job was rescaled mid-epoch.
    restarts: int = 0
    state: str = "starting"
    error: str = ""
    last_rule: str = ""
    last_reason: str = ""
    # From the newest cluster plan's decision numbers (goodput): None when not given.
    remaining_s: float | None = None
    efficient_size: int | None = None
    rank: int | None = None
    history: list[int] = field(default_factory=list)
    # When the job was submitted, and every report it sent (epoch, replicas,
    # seconds, sent_at: the clock when it started sending), oldest first.
    submitted_at: float | None = None
    reports: list[dict[str, float]] = field(default_factory=list)

    @property
    def fulfillment(self) -> float | None:
        """EDL's ``(cur - min) / (max - min)``; None before the job runs."""
        if self.desired == 0:
            return None
        if self.max_replicas == self.min_replicas:
            return 1.0
        return (self.desired - self.min_replicas) / (self.max_replicas - self.min_replicas)


def train_request(spec: JobSpec, *, namespace: str, ps_url: str | None) -> dict[str, Any]:
    """KubeML ``TrainRequest`` (with trainscaler's replica bounds)."""
    request: dict[str, Any] = {
        "model_type": spec.application,
        "batch_size": spec.batch_size,
        "epochs": spec.epochs,
        "dataset": spec.dataset,
        "function_name": spec.name,
        "namespace": namespace,
        "min_replicas": spec.min_replicas,
        "max_replicas": spec.max_replicas,
        "options": {"default_parallelism": spec.initial_replicas},
    }
    if ps_url:
        request["ps_url"] = ps_url
    return request


def train_task(
    job_id: str,
    request: dict[str, Any],
    *,
    parallelism: int,
    elapsed: float | None,
    epoch: int | None = None,
    iterations: int | None = None,
    nodes: int | None = None,
) -> dict[str, Any]:
    """KubeML ``TrainTask``: identity, parameters and the state after an epoch
    (with trainscaler's optional epoch k, iterations and nodes)."""
    state: dict[str, Any] = {"parallelism": max(1, parallelism)}
    if elapsed is not None:
        state["elapsed_time"] = round(elapsed, 4)
    extra = {"epoch": epoch, "iterations": iterations, "nodes": nodes}
    state.update({k: v for k, v in extra.items() if v is not None})
    return {"job_id": job_id, "parameters": request, "state": state}


class JobDriver:
    """Starts the simulated jobs, keeps their views, stops them on request."""

    def __init__(
        self,
        specs: tuple[JobSpec, ...],
        *,
        curves: dict[str, EpochCurve],
        api: TrainscalerApi,
        cluster: ClusterJobs,
        board: ParallelismBoard,
        ps_url: str | None,
        epoch_wall_s: float = 3.0,
        sleep_until: Callable[[threading.Event, float], bool] | None = None,
        log: Callable[[str], None] = lambda _line: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._specs = specs
        self._curves = curves
        self._api = api
        self._cluster = cluster
        self._board = board
        self._ps_url = ps_url
        self._epoch_wall_s = epoch_wall_s
        self._stop = threading.Event()
        self._wait = sleep_until or (lambda event, seconds: event.wait(seconds))
        self._log = log
        self._lock = threading.Lock()
        self._views = {
            s.name: JobView(
                name=s.name,
                mode=s.mode,
                application=s.application,
                min_replicas=s.min_replicas,
                max_replicas=s.max_replicas,
                curve_source=curves[s.name].source,
            )
            for s in specs
        }
        self._threads: list[threading.Thread] = []

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        for spec in self._specs:
            thread = threading.Thread(
                target=self._run_job, args=(spec,), name=f"job-{spec.name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self, *, timeout: float = 10.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))

    def views(self) -> list[JobView]:
        with self._lock:
            return [
                replace(v, history=list(v.history), reports=[dict(r) for r in v.reports])
                for v in self._views.values()
            ]

    def annotate(self, name: str, *, rule: str, reason: str) -> None:
        """The newest decision of a job, as the table's poller read it from the API."""
        with self._lock:
            view = self._views[name]
            view.last_rule, view.last_reason = rule, reason

    def annotate_numbers(self, name: str, numbers: Mapping[str, Any]) -> None:
        """The numbers of the job's decision in the newest plan (goodput's estimates)."""
        remaining, efficient, rank = (
            numbers.get("estimated_remaining_s"),
            numbers.get("efficient_size"),
            numbers.get("rank"),
        )
        with self._lock:
            view = self._views[name]
            view.remaining_s = float(remaining) if isinstance(remaining, int | float) else None
            view.efficient_size = int(efficient) if isinstance(efficient, int) else None
            view.rank = int(rank) if isinstance(rank, int) else None

    def _count_restart(self, name: str) -> None:
        with self._lock:
            self._views[name].restarts += 1

    def _update(self, name: str, **changes: Any) -> None:
        with self._lock:
            view = self._views[name]
            desired = changes.get("desired")
            if desired is not None and desired != view.desired:
                # A train request's first parallelism is its creation (KubeML
                # CreateTask), a scale; an ElasticJob's first count is its own.
                if view.history or view.mode == "train":
                    view.scale_events += 1
                view.history.append(int(desired))
            for key, value in changes.items():
                setattr(view, key, value)

    # --- one job -------------------------------------------------------------------

    def _run_job(self, spec: JobSpec) -> None:
        try:
            if spec.mode == "elasticjob":
                self._run_elastic_job(spec)
            else:
                self._run_train_request(spec)
        except Exception as error:  # a job's failure is shown, never fatal to the demo
            self._update(spec.name, state="failed", error=str(error)[:200])
            self._log(f"job {spec.name} failed: {error}")

    def _wall_seconds(self, spec: JobSpec, epoch_s: float) -> float:
        reference = self._curves[spec.name].epoch_seconds(max(1, spec.initial_replicas))
        return max(
            _MIN_WALL_S, min(3 * self._epoch_wall_s, self._epoch_wall_s * epoch_s / reference)
        )

    def _run_elastic_job(self, spec: JobSpec) -> None:
        namespace = self._cluster.namespace
        self._cluster.create_job(
            spec.name,
            application=spec.application,
            replicas=spec.initial_replicas,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            # No policy: the runtime's cluster policy (goodput by default) plans it.
            identity=f"{spec.application}/batch-{spec.batch_size}",
            epochs=spec.epochs,
        )
        request = train_request(spec, namespace=namespace, ps_url=None)
        self._update(
            spec.name,
            key=f"{namespace}/{spec.name}",
            job_id=spec.name,
            state="pending",
            submitted_at=self._clock(),
        )
        epoch = 0
        while not self._stop.is_set() and epoch < spec.epochs:
            desired, ready = self._cluster.replicas(spec.name)
            self._update(spec.name, desired=desired, ready=ready)
            if ready == 0:
                self._update(spec.name, state="pending")
                self._wait(self._stop, _POLL_SECONDS)
                continue
            epoch_s = self._curves[spec.name].epoch_seconds(ready)
            self._update(spec.name, state="training")
            wall_s = self._wall_seconds(spec, epoch_s)
            finished = self._train_epoch(spec, ready=ready, wall_s=wall_s)
            if self._stop.is_set():
                return
            if not finished:
                # Elastic training restarts the epoch from its checkpoint on a rescale,
                # so every report carries the replica count the whole epoch ran with.
                self._count_restart(spec.name)
                continue
            epoch += 1
            # The cluster policy (goodput) times epochs against its own rounds,
            # so an ElasticJob reports the seconds it really trained, as a real
            # job would; the table still shows the curve's (trace) epoch time.
            self._report(
                spec,
                spec.name,
                request=request,
                parallelism=ready,
                epoch_s=epoch_s,
                epoch=epoch,
                reported_s=wall_s,
            )
        self._finish(spec, spec.name)
        if not self._stop.is_set():
            # A finished job gives its GPUs back, as a completed training run would.
            self._cluster.delete_job(spec.name)

    def _train_epoch(self, spec: JobSpec, *, ready: int, wall_s: float) -> bool:
        """Wait out one epoch; False when the ready replicas changed on the way."""
        deadline = time.monotonic() + wall_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if self._wait(self._stop, min(left, _POLL_SECONDS)):
                return False
            desired, now_ready = self._cluster.replicas(spec.name)
            self._update(spec.name, desired=desired, ready=now_ready)
            if now_ready != ready:
                return False

    def _run_train_request(self, spec: JobSpec) -> None:
        namespace = self._cluster.namespace
        request = train_request(spec, namespace=namespace, ps_url=self._ps_url)
        job_id, key = self._api.train(request)
        self._update(spec.name, key=key, job_id=job_id, state="waiting")
        self._log(f"job {spec.name}: submitted as {key}")
        parallelism: int | None = None
        while parallelism is None and not self._stop.is_set():
            parallelism = self._board.wait_for(job_id, timeout=_POLL_SECONDS)
        epoch = 0
        while not self._stop.is_set() and epoch < spec.epochs and parallelism is not None:
            self._update(spec.name, desired=parallelism, ready=parallelism, state="training")
            epoch_s = self._curves[spec.name].epoch_seconds(parallelism)
            if self._wait(self._stop, self._wall_seconds(spec, epoch_s)):
                return
            epoch += 1
            answered = self._report(
                spec, job_id, request=request, parallelism=parallelism, epoch_s=epoch_s, epoch=epoch
            )
            # The parameter server's newest instruction wins; the answer is a fallback.
            parallelism = self._board.get(job_id) or answered or parallelism
            if parallelism == 0:
                parallelism = spec.min_replicas
        self._finish(spec, job_id)

    def _report(
        self,
        spec: JobSpec,
        job_id: str,
        *,
        request: dict[str, Any],
        parallelism: int,
        epoch_s: float,
        epoch: int,
        reported_s: float | None = None,
    ) -> int | None:
        task = train_task(
            job_id,
            request,
            parallelism=parallelism,
            elapsed=epoch_s if reported_s is None else reported_s,
            epoch=epoch,
            iterations=self._curves[spec.name].iterations_per_epoch,
        )
        sent_at = self._clock()
        try:
            answered = self._api.report(task)
        except ApiCallError as error:
            self._update(spec.name, error=str(error)[:200])
            self._log(f"job {spec.name}: report failed: {error}")
            return None
        sent = {
            "epoch": float(epoch),
            "replicas": float(parallelism),
            "seconds": float(epoch_s if reported_s is None else reported_s),
            "sent_at": sent_at,
        }
        with self._lock:
            self._views[spec.name].reports.append(sent)
        self._update(spec.name, epoch=epoch, epoch_time_s=epoch_s, error="")
        return answered

    def _finish(self, spec: JobSpec, job_id: str) -> None:
        if self._stop.is_set():
            return
        try:
            self._api.finish(job_id)
        except ApiCallError as error:
            self._log(f"job {spec.name}: finish failed: {error}")
        self._update(spec.name, state="finished")
