"""PNG plots of simulation runs (matplotlib, headless).

* ``plot_jct``: the distribution (CDF) of job completion times, one line per
  policy, one panel per workload;
* ``plot_gpus``: GPUs held by each job over time for one run (stacked).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from sim.trace.results import SimResult


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


def plot_gpus(result: SimResult, path: Path, *, step_s: float = 60.0) -> Path:
    """GPUs each job holds over time, stacked, for one run."""
    plt = _pyplot()
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
            series.setdefault(job, [0] * steps)[i] = gpus
    fig, axis = plt.subplots(figsize=(10, 4))
    if series:
        hours = [t / 3600 for t in times]
        axis.stackplot(hours, *series.values(), linewidth=0)
    axis.axhline(result.gpu_total, color="black", linewidth=0.8, linestyle="--")
    axis.set_xlabel("time (h)")
    axis.set_ylabel("GPUs held (one colour per job)")
    axis.set_title(f"{result.policy} on workload {result.workload}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
