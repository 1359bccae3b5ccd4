"""``trainscaler simulate``: replay workloads on the simulated GPU cluster.

Composes the trace-driven simulator (``trainscaler_sim.trace``) with the settings: runs
each chosen policy on each chosen workload through the same policy registry
the workers use, prints per policy and workload the average, p50 and p95 job
completion time, makespan, average GPUs allocated and rescales per job, and
writes ``jobs.csv`` (one row per job per run), ``summary.csv`` and PNG plots
into ``--out``.
"""

from __future__ import annotations

import csv
import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainscaler_sim.trace.engine import SimConfig
from trainscaler_sim.trace.results import Summary, write_jobs_csv
from trainscaler_sim.trace.runner import (
    default_data_dir,
    resolve_policies,
    resolve_workloads,
    run_matrix,
)
from workers.settings import get_settings


def parse_param_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``policy.field=value`` items (value as JSON, else a string) by policy."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        policy, dot, field = key.partition(".")
        if not sep or not dot or not policy or not field:
            raise typer.BadParameter(f"expected policy.field=value, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(policy, {})[field] = value
    return out


def simulate_command(
    workload: Annotated[
        str, typer.Option(help="Workload CSV path, k for workload-k of the data folder, or 'all'.")
    ] = "all",
    policy: Annotated[
        str, typer.Option(help="Policy name, comma-separated names, or 'all'.")
    ] = "all",
    *,
    data_dir: Annotated[
        Path | None, typer.Option(help="Traces and workloads folder (default: the setting).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for jobs.csv, summary.csv and plots "
            "(default: a new trainscaler-sim-* folder in the temporary directory)."
        ),
    ] = None,
    nodes: Annotated[int, typer.Option(min=1)] = 16,
    gpus_per_node: Annotated[int, typer.Option(min=1)] = 4,
    interval: Annotated[float, typer.Option(min=1.0, help="Scheduling interval (s).")] = 60.0,
    restart: Annotated[float, typer.Option(min=0.0, help="Cost of a rescale (s).")] = 30.0,
    seed: Annotated[int, typer.Option(help="Seed of the iteration-time jitter.")] = 0,
    noise: Annotated[
        float, typer.Option(min=0.0, help="Per-epoch iteration-time jitter (log sigma).")
    ] = 0.0,
    param: Annotated[
        list[str] | None, typer.Option(help="Policy parameter, policy.field=value; repeatable.")
    ] = None,
    plots: Annotated[bool, typer.Option(help="Write PNG plots (needs matplotlib).")] = True,
    placement: Annotated[
        str,
        typer.Option(
            help="kube: pods placed as deploy/scheduler/kube-scheduler-config.yaml does; "
            "ideal: the simulator's best packing."
        ),
    ] = "kube",
) -> None:
    """Replay workloads on a simulated GPU cluster and compare policies."""
    settings = get_settings()
    folder = data_dir or (
        Path(settings.pollux_data_dir) if settings.pollux_data_dir else default_data_dir()
    )
    workloads = resolve_workloads(workload, folder)
    policies = resolve_policies(policy)
    if placement not in ("kube", "ideal"):
        raise typer.BadParameter("expected kube or ideal", param_hint="--placement")
    config = SimConfig(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        interval_s=interval,
        restart_s=restart,
        seed=seed,
        noise=noise,
        placement="ideal" if placement == "ideal" else "kube",
    )
    overrides = parse_param_overrides(param or [])
    console = Console()
    if not console.is_terminal:
        # Piped output (logs, CI): never truncate the table's columns.
        console = Console(width=200)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} jobs"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    tasks: dict[tuple[str, str], Any] = {}

    def tick(policy_name: str, label: str, _now: float, done: int, total: int) -> None:
        key = (policy_name, label)
        if key not in tasks:
            tasks[key] = progress.add_task(f"{policy_name} on workload {label}", total=total)
        progress.update(tasks[key], completed=done)

    with progress:
        matrix = run_matrix(
            workloads, policies, data_dir=folder, config=config, params=overrides, progress=tick
        )
    summaries = matrix.summaries()
    console.print(_table(summaries))
    # Never into the source tree by default: results are not part of the checkout.
    out = out or Path(tempfile.mkdtemp(prefix="trainscaler-sim-"))
    out.mkdir(parents=True, exist_ok=True)
    write_jobs_csv(matrix.results, out / "jobs.csv")
    _write_summary(summaries, out / "summary.csv")
    written = [out / "jobs.csv", out / "summary.csv"]
    if plots:
        from trainscaler_sim.trace.plots import plot_gpus, plot_jct

        written.append(plot_jct(matrix.results, out / "jct.png"))
        for result in matrix.results:
            name = f"gpus-{result.policy}-workload-{result.workload}.png"
            written.append(plot_gpus(result, out / name))
    console.print(
        f"wrote {len(written)} files to {out}/ (jobs.csv, summary.csv"
        + (", PNG plots)" if plots else ")")
    )


def _table(summaries: list[Summary]) -> Table:
    table = Table(title="Simulated job completion times")
    for column in (
        "policy",
        "workload",
        "jobs",
        "avg JCT s",
        "p50 JCT s",
        "p95 JCT s",
        "makespan s",
        "avg GPUs",
        "rescales/job",
        "wall s",
    ):
        table.add_column(column, justify="left" if column in ("policy", "workload") else "right")
    for s in summaries:
        table.add_row(
            s.policy,
            s.workload,
            f"{s.finished}/{s.jobs}",
            f"{s.avg_jct_s:.0f}",
            f"{s.p50_jct_s:.0f}",
            f"{s.p95_jct_s:.0f}",
            f"{s.makespan_s:.0f}",
            f"{s.avg_gpus:.1f}",
            f"{s.rescales_per_job:.2f}",
            f"{s.wall_s:.1f}",
        )
    return table


def _write_summary(summaries: list[Summary], path: Path) -> None:
    rows = [asdict(s) for s in summaries]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["policy"])
        writer.writeheader()
        writer.writerows(rows)


def register(app: typer.Typer) -> None:
    app.command(name="simulate")(simulate_command)
