"""What a simulation run produced: per-job outcomes, summaries, CSV output.

``rescales`` counts restarts as the Pollux simulator does: every allocation
of a non-empty placement after the job's first start (a resize, a move, or a
resume after preemption).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class JobResult:
    name: str
    application: str
    batch_size: int
    requested_replicas: int
    arrival_s: float
    start_s: float | None
    completion_s: float | None
    rescales: int
    gpu_seconds: float
    max_gpus: int

    @property
    def jct_s(self) -> float | None:
        return None if self.completion_s is None else self.completion_s - self.arrival_s


@dataclass(frozen=True)
class Summary:
    policy: str
    workload: str
    jobs: int
    finished: int
    avg_jct_s: float
    p50_jct_s: float
    p95_jct_s: float
    makespan_s: float
    avg_gpus: float
    rescales_per_job: float
    wall_s: float


@dataclass
class SimResult:
    policy: str
    workload: str
    jobs: list[JobResult]
    gpu_total: int
    makespan_s: float
    gpu_seconds_allocated: float
    wall_s: float = 0.0
    # (time, job, gpus held from that time on), one entry per change.
    timeline: list[tuple[float, str, int]] = field(default_factory=list)

    def summary(self) -> Summary:
        jcts = sorted(j.jct_s for j in self.jobs if j.jct_s is not None)
        return Summary(
            policy=self.policy,
            workload=self.workload,
            jobs=len(self.jobs),
            finished=len(jcts),
            avg_jct_s=sum(jcts) / len(jcts) if jcts else math.nan,
            p50_jct_s=percentile(jcts, 50),
            p95_jct_s=percentile(jcts, 95),
            makespan_s=self.makespan_s,
            avg_gpus=self.gpu_seconds_allocated / self.makespan_s if self.makespan_s > 0 else 0.0,
            rescales_per_job=(
                sum(j.rescales for j in self.jobs) / len(self.jobs) if self.jobs else 0.0
            ),
            wall_s=self.wall_s,
        )


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


JOB_COLUMNS = [
    "policy",
    "workload",
    "name",
    "application",
    "batch_size",
    "requested_replicas",
    "arrival_s",
    "start_s",
    "completion_s",
    "jct_s",
    "rescales",
    "gpu_seconds",
    "max_gpus",
]


def write_jobs_csv(results: list[SimResult], path: Path) -> None:
    """One row per job per run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=JOB_COLUMNS)
        writer.writeheader()
        for result in results:
            for job in result.jobs:
                row = asdict(job)
                row.update(policy=result.policy, workload=result.workload, jct_s=job.jct_s)
                writer.writerow(row)
