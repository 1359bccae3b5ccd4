"""Epoch time of a simulated training job as a function of its replica count.

With the measured Pollux traces (``../shared/data/pollux``, read through
``trainscaler_sim.trace.traces``), an epoch at ``n`` replicas takes the trace's iteration
time for ``n`` replicas packed onto nodes of ``gpus_per_node`` GPUs, times the
iterations of the first epoch at the job's batch size. Without that folder,
built-in synthetic curves stand in: Amdahl's law plus a per-replica
synchronisation cost, so adding replicas helps less and less and finally hurts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainscaler_sim.trace.traces import ApplicationTrace


class EpochCurve(Protocol):
    """Seconds one epoch takes at a replica count (at least 1)."""

    @property
    def source(self) -> str: ...

    def epoch_seconds(self, replicas: int) -> float: ...

    @property
    def iterations_per_epoch(self) -> int: ...


@dataclass(frozen=True)
class SyntheticCurve:
    """``t1 * (serial + (1 - serial) / n) + sync * (n - 1)``."""

    single_replica_s: float
    serial_fraction: float
    sync_s_per_replica: float

    @property
    def source(self) -> str:
        return "synthetic"

    @property
    def iterations_per_epoch(self) -> int:
        return 100

    def epoch_seconds(self, replicas: int) -> float:
        n = max(1, replicas)
        parallel = self.single_replica_s * (self.serial_fraction + (1.0 - self.serial_fraction) / n)
        return parallel + self.sync_s_per_replica * (n - 1)


@dataclass(frozen=True)
class TraceCurve:
    """An application's measured epoch time at a global batch size."""

    trace: ApplicationTrace
    batch_size: int
    gpus_per_node: int = 4

    @property
    def source(self) -> str:
        return f"trace:{self.trace.name}"

    @property
    def iterations_per_epoch(self) -> int:
        """Iterations of the first epoch at the job's batch size (every epoch here)."""
        return self.trace.epoch_ends(self.batch_size)[0]

    def placement(self, replicas: int) -> list[int]:
        """Replicas packed onto as few nodes as possible (full nodes first)."""
        n = max(1, replicas)
        full, rest = divmod(n, self.gpus_per_node)
        return [self.gpus_per_node] * full + ([rest] if rest else [])

    def epoch_seconds(self, replicas: int) -> float:
        iterations = self.trace.epoch_ends(self.batch_size)[0]
        return self.trace.iteration_time(self.placement(replicas), self.batch_size) * iterations


# Shapes chosen to resemble the traced applications: a fast, well-scaling
# image model, a small recommendation model that stops scaling early, a
# language model with a large per-epoch cost.
SYNTHETIC: dict[str, SyntheticCurve] = {
    "cifar10": SyntheticCurve(single_replica_s=40.0, serial_fraction=0.05, sync_s_per_replica=0.4),
    "ncf": SyntheticCurve(single_replica_s=12.0, serial_fraction=0.3, sync_s_per_replica=0.6),
    "bert": SyntheticCurve(single_replica_s=300.0, serial_fraction=0.02, sync_s_per_replica=2.0),
    "imagenet": SyntheticCurve(
        single_replica_s=900.0, serial_fraction=0.01, sync_s_per_replica=4.0
    ),
    "yolov3": SyntheticCurve(single_replica_s=200.0, serial_fraction=0.05, sync_s_per_replica=2.5),
    "deepspeech2": SyntheticCurve(
        single_replica_s=150.0, serial_fraction=0.08, sync_s_per_replica=1.5
    ),
}


def curve_for(
    application: str,
    batch_size: int,
    *,
    data_dir: Path | None,
    gpus_per_node: int = 4,
    loaded: dict[str, ApplicationTrace] | None = None,
) -> EpochCurve:
    """The measured curve when ``data_dir/traces/<application>`` exists, else synthetic.

    ``loaded`` caches traces across calls (the CSVs are read once per application).
    """
    folder = data_dir / "traces" / application if data_dir is not None else None
    if folder is not None and folder.is_dir():
        cache = loaded if loaded is not None else {}
        trace = cache.get(application)
        if trace is None:
            trace = ApplicationTrace.load(folder)
            cache[application] = trace
        return TraceCurve(trace=trace, batch_size=batch_size, gpus_per_node=gpus_per_node)
    synthetic = SYNTHETIC.get(application)
    if synthetic is None:
        raise ValueError(
            f"no curve for application {application!r}; known: {', '.join(sorted(SYNTHETIC))}"
        )
    return synthetic
