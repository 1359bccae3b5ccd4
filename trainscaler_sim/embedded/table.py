"""The embedded system's live view: every job in one table, or plain log lines.

A poller thread reads, every ``interval`` seconds, the same views the CLI
prints: ``GET /jobs`` (every job the runtime knows and every ElasticJob in the
cluster, including ones added with kubectl or the CLI, with goodput's
estimated remaining time, efficient size and rank from the newest plan) and
``GET /plan`` (the cluster's GPU use, as ``trainscaler plan`` shows it). How a job row looks is
handed in (``JobsLayout``; ``trainscaler run`` passes the CLI's), so the table
and ``trainscaler jobs`` agree. The title says when nothing is running;
finished jobs stay, marked and dimmed. ``--no-table`` prints one line per
change of the simulated jobs instead, for tests and CI logs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from trainscaler_sim.embedded.api_client import TrainscalerApi
from trainscaler_sim.embedded.driver import JobDriver, JobView

Summary = Mapping[str, Any]


@dataclass(frozen=True)
class JobsLayout:
    """The columns of a job row and how a ``GET /jobs`` summary fills them."""

    columns: Sequence[str]
    row: Callable[[Summary], Sequence[str]]


@dataclass(frozen=True)
class GpuUse:
    used: int
    total: int
    nodes: int


@dataclass
class ClusterStatus:
    jobs: list[Summary] = field(default_factory=list)
    gpu: GpuUse | None = None
    error: str = ""


def gpu_use(plan: Summary | None) -> GpuUse | None:
    """GPU limits of live pods over the nodes' allocatable, from a ``GET /plan`` answer."""
    cluster = plan.get("cluster") if isinstance(plan, Mapping) else None
    if not isinstance(cluster, Mapping):
        return None
    return GpuUse(
        used=int(cluster.get("gpu_limit", 0)),
        total=int(cluster.get("gpu_total", 0)),
        nodes=int(cluster.get("node_count", 0)),
    )


def split_reason(text: str | None) -> tuple[str, str]:
    """``"rule: message"`` (a summary's ``last_reason``) as (rule, message)."""
    rule, _, message = (text or "").partition(": ")
    return rule, message


class StatusPoller:
    """Refreshes the jobs and GPU use on a thread; every call bounded by the client's timeout."""

    def __init__(self, driver: JobDriver | None, *, api: TrainscalerApi, interval: float = 2.0):
        self._driver = driver
        self._api = api
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._status = ClusterStatus()
        self._thread = threading.Thread(target=self._run, name="status-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 15)

    def status(self) -> ClusterStatus:
        with self._lock:
            return ClusterStatus(
                jobs=list(self._status.jobs), gpu=self._status.gpu, error=self._status.error
            )

    def poll_once(self) -> None:
        errors: list[str] = []
        try:
            jobs = [j for j in self._api.jobs() if isinstance(j, Mapping)]
        except Exception as failure:  # shown in the title, retried on the next poll
            jobs, errors = self.status().jobs, [f"jobs: {failure}"[:120]]
        try:
            gpu = gpu_use(self._api.plan())
        except Exception as failure:  # the cluster may be briefly unreachable
            gpu, errors = self.status().gpu, [*errors, f"plan: {failure}"[:120]]
        if self._driver is not None:
            by_key = {str(j.get("job")): j for j in jobs}
            for view in self._driver.views():
                summary = by_key.get(view.key)
                if summary is None:
                    continue
                if summary.get("last_reason"):
                    rule, message = split_reason(str(summary["last_reason"]))
                    self._driver.annotate(view.name, rule=rule, reason=message)
                # goodput's numbers in the newest plan, for the plain change lines.
                self._driver.annotate_numbers(view.name, summary)
        with self._lock:
            self._status = ClusterStatus(jobs=jobs, gpu=gpu, error="; ".join(errors))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)


def headline(jobs: Sequence[Summary]) -> str:
    """What the jobs are doing, in words; says so when nothing runs."""
    if not jobs:
        return "no jobs yet"
    states = [str(j.get("state")) for j in jobs]
    running = states.count("running")
    finished = states.count("finished")
    waiting = len(states) - running - finished
    if running == 0:
        if finished == len(states):
            return f"nothing running: all {finished} jobs finished"
        return f"nothing running: {waiting} waiting, {finished} finished"
    return f"{running} running, {waiting} waiting, {finished} finished"


def render_table(
    status: ClusterStatus,
    *,
    layout: JobsLayout,
    urls: Mapping[str, str],
    elapsed_s: float,
) -> Table:
    gpu = status.gpu
    gpu_text = f"{gpu.used}/{gpu.total} GPUs in use on {gpu.nodes} nodes" if gpu else "GPUs: ?"
    title = f"trainscaler embedded - {elapsed_s:,.0f}s - {gpu_text} - {headline(status.jobs)}"
    if status.error:
        title += f" - [red]{status.error}[/red]"
    table = Table(
        title=title,
        caption="  ".join(f"{name}: {url}" for name, url in urls.items()) + "  (Ctrl-C stops)",
        expand=True,
    )
    for column in layout.columns:
        last = column == layout.columns[-1]  # the reason: the rest of the width, folded
        table.add_column(column, overflow="fold", no_wrap=not last, ratio=1 if last else None)
    for summary in status.jobs:
        finished = summary.get("state") == "finished"
        table.add_row(*layout.row(summary), style="dim" if finished else None)
    return table


def _fulfillment(view: JobView) -> str:
    value = view.fulfillment
    return f"{value:.0%}" if value is not None else "-"


def _epoch_time(view: JobView) -> str:
    return f"{view.epoch_time_s:,.1f}s" if view.epoch_time_s is not None else "-"


def _remaining(view: JobView) -> str:
    return f"{view.remaining_s:,.0f}s" if view.remaining_s is not None else "-"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def change_lines(views: Iterable[JobView], previous: dict[str, tuple[Any, ...]]) -> list[str]:
    """Plain lines for the jobs whose replicas, state or decision changed since last call."""
    lines = []
    for view in views:
        signature = (view.desired, view.ready, view.state, view.last_rule, view.scale_events)
        if previous.get(view.name) == signature:
            continue
        previous[view.name] = signature
        lines.append(
            f"job {view.name} kind={view.mode} replicas={view.desired} ready={view.ready} "
            f"min={view.min_replicas} max={view.max_replicas} "
            f"fulfillment={_fulfillment(view)} epoch={view.epoch} "
            f"epoch_time={_epoch_time(view)} est_left={_remaining(view)} "
            f"efficient={_number(view.efficient_size)} rank={_number(view.rank)} "
            f"state={view.state} scales={view.scale_events} "
            f"decision={view.last_rule or '-'} reason={view.last_reason or '-'}"
        )
    return lines
