"""Running policies over workloads: what ``trainscaler simulate`` and the
benchmark share.

The data folder defaults to ``../shared/data/pollux`` beside the repository
root; callers pass another one explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler_core.registry import policy_names
from trainscaler_sim.trace.engine import SimConfig, simulate
from trainscaler_sim.trace.results import SimResult, Summary
from trainscaler_sim.trace.traces import load_traces
from trainscaler_sim.trace.workload import load_workload, workload_paths

# The policies the study compares, in the order tables show them.
COMPARED_POLICIES = ("static", "edl", "throughput", "tiresias", "goodput")


def default_data_dir() -> Path:
    """``../shared/data/pollux`` relative to the repository root."""
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux"


def resolve_workloads(spec: str, data_dir: Path) -> list[Path]:
    """``all`` = every workload CSV of the data folder; else a path (or k for workload-k)."""
    if spec == "all":
        return workload_paths(data_dir)
    path = Path(spec)
    if not path.exists() and spec.isdigit():
        path = data_dir / "workloads" / f"workload-{spec}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no workload CSV at {path}")
    return [path]


def resolve_policies(spec: str) -> list[str]:
    """``all`` = the compared policies (those registered); else a comma list of names."""
    known = set(policy_names())
    if spec == "all":
        return [p for p in COMPARED_POLICIES if p in known]
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return names


def workload_label(path: Path) -> str:
    stem = path.stem
    return stem.removeprefix("workload-")


RunProgress = Callable[[str, str, float, int, int], None]


@dataclass(frozen=True)
class Matrix:
    results: list[SimResult]

    def summaries(self) -> list[Summary]:
        return [r.summary() for r in self.results]


def run_matrix(
    workloads: Sequence[Path],
    policies: Sequence[str],
    *,
    data_dir: Path,
    config: SimConfig | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    progress: RunProgress | None = None,
) -> Matrix:
    """Every policy on every workload (traces loaded once)."""
    jobs_by_workload = {workload_label(p): load_workload(p) for p in workloads}
    applications = {job.application for jobs in jobs_by_workload.values() for job in jobs}
    traces = load_traces(data_dir, applications)
    results: list[SimResult] = []
    for label, jobs in jobs_by_workload.items():
        for policy in policies:

            def tick(now: float, done: int, total: int, *, p: str = policy, w: str = label) -> None:
                if progress is not None:
                    progress(p, w, now, done, total)

            results.append(
                simulate(
                    jobs,
                    traces,
                    policy=policy,
                    params=(params or {}).get(policy),
                    config=config,
                    workload_name=label,
                    progress=tick,
                )
            )
    return Matrix(results)


def geometric_mean(values: Sequence[float]) -> float:
    if not values or any(v <= 0 or math.isnan(v) for v in values):
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))
