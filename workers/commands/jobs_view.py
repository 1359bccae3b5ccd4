"""One view of jobs, printed the same everywhere: ``trainscaler jobs`` and the live table.

Rows are ``GET /jobs`` summaries (``workers.api.schemas.JobSummary`` as JSON):
name and key; policy, min, max, fulfillment, replicas current and desired;
state (running, waiting with what for, finished); the last epoch; goodput's
estimated remaining time, efficient size and rank in the newest plan; the last
decision's reason. ``trainscaler run`` hands ``job_row`` to the live table
(``trainscaler_sim.embedded.table``), which cannot import the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

JOB_COLUMNS = (
    "name", "job", "policy", "min", "max", "fulfil", "replicas", "desired", "state",
    "epoch", "epoch s", "est. left", "eff. size", "rank", "last reason",
)  # fmt: skip
STATES = ("running", "waiting", "finished")


def _text(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _seconds(value: Any) -> str:
    return f"{value:,.0f}s" if isinstance(value, int | float) else "-"


def fulfil_text(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "-"


def state_text(summary: Mapping[str, Any]) -> str:
    state = str(summary.get("state") or "-")
    waiting_for = summary.get("waiting_for")
    if state == "waiting" and waiting_for:
        state = f"waiting for {waiting_for}"
    if not summary.get("scalable", True):
        state += " - cannot be scaled"
    return state


def state_counts(summaries: Sequence[Mapping[str, Any]]) -> str:
    """``2 running, 1 waiting, 0 finished``."""
    states = [str(s.get("state")) for s in summaries]
    return ", ".join(f"{states.count(name)} {name}" for name in STATES)


def job_row(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """One summary as the cells of ``JOB_COLUMNS``."""
    return (
        str(summary.get("name") or "-"),
        str(summary["job"]),
        _text(summary.get("policy")),
        _text(summary.get("min_replicas")),
        _text(summary.get("max_replicas")),
        fulfil_text(summary.get("fulfillment")),
        _text(summary.get("replicas")),
        _text(summary.get("desired")),
        state_text(summary),
        _text(summary.get("last_epoch")),
        _text(summary.get("last_epoch_time_s"), 1),
        _seconds(summary.get("estimated_remaining_s")),
        _text(summary.get("efficient_size")),
        _text(summary.get("rank")),
        _text(summary.get("last_reason")),
    )


def jobs_table(summaries: Sequence[Mapping[str, Any]], *, title: str | None = None) -> Table:
    table = Table(title=title or f"{len(summaries)} job(s): {state_counts(summaries)}")
    for column in JOB_COLUMNS:
        table.add_column(column, overflow="fold")
    for summary in summaries:
        table.add_row(*job_row(summary))
    return table
