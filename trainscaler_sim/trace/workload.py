"""Workload CSVs: which jobs arrive when, for which application and batch size.

Reads ``../shared/data/pollux/workloads/workload-<k>.csv`` (columns
``name,time,application,num_replicas,batch_size``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkloadJob:
    """One job of a workload, as the user submitted it."""

    name: str
    arrival_s: float
    application: str
    requested_replicas: int
    batch_size: int


def load_workload(path: Path) -> tuple[WorkloadJob, ...]:
    """The jobs of one workload CSV, in arrival order (ties by name)."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    required = {"name", "time", "application", "num_replicas", "batch_size"}
    if rows and not required <= set(rows[0]):
        raise ValueError(f"{path}: expected columns {sorted(required)}, got {sorted(rows[0])}")
    jobs = [
        WorkloadJob(
            name=row["name"],
            arrival_s=float(row["time"]),
            application=row["application"],
            requested_replicas=max(1, int(row["num_replicas"])),
            batch_size=int(row["batch_size"]),
        )
        for row in rows
    ]
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: job names are not unique")
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.name)))


def workload_paths(data_dir: Path) -> list[Path]:
    """Every ``workload-<k>.csv`` under ``data_dir/workloads``, by k."""
    folder = data_dir / "workloads"
    paths = list(folder.glob("workload-*.csv"))
    if not paths:
        raise FileNotFoundError(f"no workload-<k>.csv files in {folder}")
    return sorted(paths, key=lambda p: (len(p.stem), p.stem))
