"""The embedded system's live view: a rich table per job, or plain log lines.

A poller thread refreshes, every ``interval`` seconds, each job's newest
decision and its reason (``GET /jobs/{id}``) and the cluster's GPU use; the
table shows per job replicas (desired and ready), min/max, EDL fulfillment,
the last epoch time, goodput's estimated remaining time, efficient size and
rank (the newest plan's numbers), the last decision with its reason, and a footer with
GPU use and the URLs. ``--no-table`` prints one line per change instead, for
tests and CI logs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from sim.embedded.api_client import TrainscalerApi
from sim.embedded.driver import JobDriver, JobView
from sim.embedded.kube import ClusterJobs, GpuUse


def _decision_items(answer: Any) -> list[Mapping[str, Any]]:
    if not isinstance(answer, Mapping):
        return []
    for name in ("decisions", "history", "decision_history"):
        items = answer.get(name)
        if isinstance(items, list):
            return [i for i in items if isinstance(i, Mapping)]
    return []


def _reason_of(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(item.get("rule"), str):
        return item  # the API's DecisionView: rule and message side by side
    reason = item.get("reason")
    if isinstance(reason, Mapping):
        return reason
    decision = item.get("decision")
    if isinstance(decision, Mapping):
        return _reason_of(decision)
    return None


def planned_numbers(answer: Any) -> Mapping[str, Any] | None:
    """The numbers of the job's decision in the newest cluster plan (``planned``)."""
    planned = answer.get("planned") if isinstance(answer, Mapping) else None
    numbers = planned.get("numbers") if isinstance(planned, Mapping) else None
    return numbers if isinstance(numbers, Mapping) else None


def latest_decision(answer: Any) -> tuple[str, str] | None:
    """(rule, message) of the newest decision in a ``GET /jobs/{id}`` answer."""
    items = _decision_items(answer)
    if not items:
        return None

    def order(item: Mapping[str, Any]) -> tuple[float, float]:
        generation = item.get("generation")
        at = item.get("at")
        return (
            float(at) if isinstance(at, int | float) else 0.0,
            float(generation) if isinstance(generation, int | float) else 0.0,
        )

    newest = max(items, key=order) if any(order(i) != (0.0, 0.0) for i in items) else items[0]
    reason = _reason_of(newest)
    if reason is None:
        return None
    return str(reason.get("rule") or ""), str(reason.get("message") or "")


@dataclass
class ClusterStatus:
    gpu: GpuUse | None = None
    error: str = ""


class StatusPoller:
    """Refreshes decisions and GPU use on a thread; every call bounded by the client timeouts."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        api: TrainscalerApi,
        cluster: ClusterJobs,
        interval: float = 2.0,
    ) -> None:
        self._driver = driver
        self._api = api
        self._cluster = cluster
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
            return ClusterStatus(gpu=self._status.gpu, error=self._status.error)

    def poll_once(self) -> None:
        for view in self._driver.views():
            if not view.key:
                continue
            try:
                answer = self._api.job(view.key)
                if view.mode == "elasticjob":
                    # Its decisions come from the autoscaler; the scaler writes them on the CR.
                    found = self._cluster.last_decision(view.name)
                else:
                    found = latest_decision(answer)
            except Exception:  # shown as "no decision yet"; the next poll retries
                continue
            if found is not None:
                self._driver.annotate(view.name, rule=found[0], reason=found[1])
            numbers = planned_numbers(answer)
            if numbers is not None:
                self._driver.annotate_numbers(view.name, numbers)
        try:
            gpu = self._cluster.gpu_use()
            error = ""
        except Exception as failure:  # the cluster may be briefly unreachable; shown, retried
            gpu, error = None, str(failure)[:120]
        with self._lock:
            self._status = ClusterStatus(gpu=gpu or self._status.gpu, error=error)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._interval)


def _fulfillment(view: JobView) -> str:
    value = view.fulfillment
    return f"{value:.0%}" if value is not None else "-"


def _epoch_time(view: JobView) -> str:
    return f"{view.epoch_time_s:,.1f}s" if view.epoch_time_s is not None else "-"


def _remaining(view: JobView) -> str:
    return f"{view.remaining_s:,.0f}s" if view.remaining_s is not None else "-"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_table(
    views: Iterable[JobView], *, status: ClusterStatus, urls: Mapping[str, str], elapsed_s: float
) -> Table:
    gpu = status.gpu
    gpu_text = f"{gpu.used}/{gpu.total} GPUs requested on {gpu.nodes} nodes" if gpu else "GPUs: ?"
    table = Table(
        title=f"trainscaler embedded - {elapsed_s:,.0f}s - {gpu_text}",
        caption="  ".join(f"{name}: {url}" for name, url in urls.items()) + "  (Ctrl-C stops)",
        expand=True,
    )
    for column in ("job", "kind", "replicas", "min/max", "fulfil", "epoch", "epoch time"):
        table.add_column(column, no_wrap=True)
    # goodput's numbers from the newest plan: estimated remaining time, efficient size, rank.
    for column in ("est. left", "eff. size", "rank"):
        table.add_column(column, no_wrap=True)
    table.add_column("last decision and reason", overflow="fold")
    for view in views:
        replicas = (
            f"{view.ready}/{view.desired}" if view.ready != view.desired else str(view.desired)
        )
        reason = f"[bold]{view.last_rule}[/bold] {view.last_reason}" if view.last_rule else ""
        if view.error:
            reason = f"{reason} [red]{view.error}[/red]".strip()
        table.add_row(
            view.name,
            f"{view.mode} ({view.curve_source})",
            replicas,
            f"{view.min_replicas}/{view.max_replicas}",
            _fulfillment(view),
            f"{view.epoch} {view.state}",
            _epoch_time(view),
            _remaining(view),
            _number(view.efficient_size),
            _number(view.rank),
            reason,
        )
    return table


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
