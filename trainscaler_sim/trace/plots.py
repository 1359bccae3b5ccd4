"""PNG plots of simulation runs (matplotlib, headless).

* ``plot_jct``: the distribution (CDF) of job completion times, one line per
  policy, one panel per workload;
* ``plot_gpus``: GPUs held over time for one run, stacked by application, with
  a legend and the cluster's capacity as a labelled line.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from trainscaler_sim.trace.results import SimResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_jct(results: list[SimResult], path: Path) -> Path:
    """CDF of JCT per policy, one panel per workload."""
    plt = _pyplot()
    by_workload: dict[str, list[SimResult]] = defaultdict(list)
    for result in results:
        by_workload[result.workload].append(result)
    workloads = sorted(by_workload)
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4), squeeze=False)
    for axis, workload in zip(axes[0], workloads, strict=True):
        for result in by_workload[workload]:
            jcts = sorted(j.jct_s for j in result.jobs if j.jct_s is not None)
            if not jcts:
                continue
            fractions = [(i + 1) / len(jcts) for i in range(len(jcts))]
            axis.step(jcts, fractions, where="post", label=result.policy)
        axis.set_xscale("log")
        axis.set_xlabel("job completion time (s)")
        axis.set_ylabel("fraction of jobs")
        axis.set_title(f"workload {workload}")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def gpus_by_application(
    result: SimResult, *, step_s: float = 60.0
) -> tuple[list[float], dict[str, list[int]]]:
    """Sample times and, per application, the GPUs its jobs hold at each time."""
    application = {job.name: job.application for job in result.jobs}
    end = max((t for t, _, _ in result.timeline), default=0.0)
    steps = max(1, int(end // step_s) + 1)
    times = [i * step_s for i in range(steps)]
    series: dict[str, list[int]] = {}
    held: dict[str, int] = {}
    events = sorted(result.timeline, key=lambda e: e[0])
    index = 0
    for i, time_s in enumerate(times):
        while index < len(events) and events[index][0] <= time_s:
            _, job, gpus = events[index]
            held[job] = gpus
            index += 1
        for job, gpus in held.items():
            app = application.get(job, "other")
            series.setdefault(app, [0] * steps)[i] += gpus
    return times, dict(sorted(series.items()))


def plot_gpus(result: SimResult, path: Path, *, step_s: float = 60.0) -> Path:
    """GPUs held over time for one run, stacked by application, with the cluster's capacity."""
    plt = _pyplot()
    times, series = gpus_by_application(result, step_s=step_s)
    fig, axis = plt.subplots(figsize=(10, 4.5))
    hours = [t / 3600 for t in times]
    if series:
        colours = plt.get_cmap("tab10").colors
        axis.stackplot(
            hours,
            *series.values(),
            labels=[
                f"{app} ({sum(1 for j in result.jobs if j.application == app)} jobs)"
                for app in series
            ],
            colors=[colours[i % len(colours)] for i in range(len(series))],
            linewidth=0,
        )
    axis.axhline(
        result.gpu_total,
        color="black",
        linewidth=1.0,
        linestyle="--",
        label=f"capacity ({result.gpu_total} GPUs)",
    )
    axis.set_ylim(0, result.gpu_total * 1.1 if result.gpu_total else None)
    axis.set_xlabel("time (h)")
    axis.set_ylabel("GPUs held")
    axis.set_title(f"GPUs held by application: {result.policy} on workload {result.workload}")
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
