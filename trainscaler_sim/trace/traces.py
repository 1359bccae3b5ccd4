"""Measured application traces: iteration time per placement, work per epoch.

Reads one folder of ``../shared/data/pollux/traces/<application>/`` (the Pollux
OSDI'21 artifact) and answers the two questions the simulator asks:

* how long one training iteration takes for a placement (replicas per node)
  at a global batch size: exact where ``placements.csv`` measured it,
  interpolated by per-replica batch size within a placement, and by node count
  and replicas per node across placements (``placements.csv`` plus
  ``scalability.csv``) otherwise; per-replica batches above the largest
  measured one run as gradient accumulation, as in the Pollux simulator;
* how many iterations each epoch ends at for a batch size (from
  ``validation-<B>.csv``, interpolated log-log between measured batch sizes).
"""

from __future__ import annotations

import bisect
import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Epoch counts the Pollux study trained each application for (data README).
EPOCHS: dict[str, int] = {
    "bert": 2,
    "cifar10": 100,
    "ncf": 10,
    "imagenet": 90,
    "deepspeech2": 80,
    "yolov3": 50,
}
# Largest per-replica batch that fits in GPU memory, where the README gives one.
MAX_LOCAL_BATCH: dict[str, int] = {"yolov3": 8}
# The traces measured at most 16 nodes; larger spreads are treated as 16.
MAX_MEASURED_NODES = 16
GPUS_PER_MEASURED_NODE = 4


@dataclass(frozen=True)
class _Curve:
    """Piecewise-linear (step_time, sync_time) over per-replica batch size."""

    local_bsz: tuple[float, ...]
    step_time: tuple[float, ...]
    sync_time: tuple[float, ...]

    def at(self, local_bsz: float) -> tuple[float, float]:
        return _interp(self.local_bsz, self.step_time, x=local_bsz), _interp(
            self.local_bsz, self.sync_time, x=local_bsz
        )


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], *, x: float) -> float:
    """Linear interpolation; linear extrapolation past the ends, kept positive."""
    if len(xs) == 1:
        return ys[0]
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return ys[i]
    i = min(max(i, 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return max(y, 0.25 * min(y0, y1)) if y1 >= 0 and y0 >= 0 else y


def _curve(rows: list[tuple[float, float, float]]) -> _Curve:
    by_bsz: dict[float, list[tuple[float, float]]] = defaultdict(list)
    for bsz, step, sync in rows:
        by_bsz[bsz].append((step, sync))
    xs = tuple(sorted(by_bsz))
    steps = tuple(sum(s for s, _ in by_bsz[x]) / len(by_bsz[x]) for x in xs)
    syncs = tuple(sum(s for _, s in by_bsz[x]) / len(by_bsz[x]) for x in xs)
    return _Curve(xs, steps, syncs)


def placement_key(placement: tuple[int, ...] | list[int]) -> str:
    """The traces' name of a placement: replicas per used node, ascending digits."""
    return "".join(str(n) for n in sorted(n for n in placement if n > 0))


@dataclass
class ApplicationTrace:
    """One application's measurements, with interpolation between them."""

    name: str
    placements: dict[str, _Curve]
    # node count -> sorted (replicas per node, curve) for the cross-placement grid.
    grid: dict[int, list[tuple[float, _Curve]]]
    validation: dict[int, tuple[int, ...]]
    min_local_bsz: int
    max_local_bsz: int
    epochs: int
    _cache: dict[tuple[str, int], float] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, folder: Path) -> ApplicationTrace:
        name = folder.name
        per_placement: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        with (folder / "placements.csv").open() as handle:
            for row in csv.DictReader(handle):
                key = placement_key([int(c) for c in row["placement"]])
                per_placement[key].append(
                    (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
                )
        grid_rows: dict[tuple[int, int], list[tuple[float, float, float]]] = defaultdict(list)
        for key, rows in per_placement.items():
            grid_rows[(len(key), sum(int(c) for c in key))].extend(rows)
        with (folder / "scalability.csv").open() as handle:
            for row in csv.DictReader(handle):
                grid_rows[(int(row["num_nodes"]), int(row["num_replicas"]))].append(
                    (float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
                )
        grid: dict[int, list[tuple[float, _Curve]]] = defaultdict(list)
        for (nodes, replicas), rows in grid_rows.items():
            grid[nodes].append((replicas / nodes, _curve(rows)))
        for points in grid.values():
            points.sort(key=lambda p: p[0])
        validation: dict[int, tuple[int, ...]] = {}
        for path in folder.glob("validation-*.csv"):
            batch = int(path.stem.split("-")[-1])
            with path.open() as handle:
                validation[batch] = tuple(int(r["iteration"]) for r in csv.DictReader(handle))
        if not validation:
            raise ValueError(f"{folder}: no validation-<B>.csv files")
        # Applications the study did not name train for every epoch measured.
        epochs = EPOCHS.get(name, min(len(v) for v in validation.values()))
        all_bsz = [x for rows in per_placement.values() for x, _, _ in rows]
        max_local = int(max(all_bsz))
        return cls(
            name=name,
            placements={k: _curve(v) for k, v in per_placement.items()},
            grid=dict(grid),
            validation=validation,
            min_local_bsz=int(min(all_bsz)),
            max_local_bsz=min(max_local, MAX_LOCAL_BATCH.get(name, max_local)),
            epochs=epochs,
        )

    # --- throughput ---------------------------------------------------------

    def max_replicas(self, batch_size: int, *, cap: int = 64) -> int:
        """Global batch / smallest measured per-replica batch, at most ``cap``."""
        return max(1, min(cap, batch_size // self.min_local_bsz))

    def iteration_time(self, placement: tuple[int, ...] | list[int], batch_size: int) -> float:
        """Seconds per iteration of global batch ``batch_size`` on ``placement``."""
        key = placement_key(placement)
        if not key:
            raise ValueError("an empty placement has no iteration time")
        cached = self._cache.get((key, batch_size))
        if cached is not None:
            return cached
        replicas = sum(int(c) for c in key)
        local = math.ceil(batch_size / replicas - 1e-8)
        # Pollux simulator: accumulate gradients when the batch does not fit one GPU.
        accum_steps = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        atomic = math.ceil(local / (accum_steps + 1) - 1e-8)
        step, sync = self._step_and_sync(key, atomic)
        value = step + (step - sync) * accum_steps
        self._cache[(key, batch_size)] = value
        return value

    def _step_and_sync(self, key: str, local_bsz: float) -> tuple[float, float]:
        curve = self.placements.get(key)
        if curve is not None:
            return curve.at(local_bsz)
        nodes = min(len(key), MAX_MEASURED_NODES)
        density = sum(int(c) for c in key) / len(key)
        node_counts = sorted(self.grid)
        i = bisect.bisect_left(node_counts, nodes)
        if i < len(node_counts) and node_counts[i] == nodes:
            return self._at_nodes(nodes, density, local_bsz=local_bsz)
        i = min(max(i, 1), len(node_counts) - 1)
        n0, n1 = node_counts[i - 1], node_counts[i]
        s0, y0 = self._at_nodes(n0, density, local_bsz=local_bsz)
        s1, y1 = self._at_nodes(n1, density, local_bsz=local_bsz)
        w = (nodes - n0) / (n1 - n0)
        return s0 + (s1 - s0) * w, y0 + (y1 - y0) * w

    def _at_nodes(self, nodes: int, density: float, *, local_bsz: float) -> tuple[float, float]:
        points = self.grid[nodes]
        densities = [d for d, _ in points]
        i = bisect.bisect_left(densities, density)
        if i < len(points) and densities[i] == density:
            return points[i][1].at(local_bsz)
        i = min(max(i, 1), len(points) - 1)
        (d0, c0), (d1, c1) = points[i - 1], points[i]
        s0, y0 = c0.at(local_bsz)
        s1, y1 = c1.at(local_bsz)
        w = (density - d0) / (d1 - d0)
        return s0 + (s1 - s0) * w, y0 + (y1 - y0) * w

    # --- work ---------------------------------------------------------------

    def epoch_ends(self, batch_size: int) -> tuple[int, ...]:
        """Cumulative iterations at the end of each epoch 1..N at ``batch_size``."""
        measured = self.validation.get(batch_size)
        if measured is None:
            measured = self._interpolated_validation(batch_size)
        ends = measured[: self.epochs]
        if len(ends) < self.epochs:
            raise ValueError(f"{self.name}: validation for batch {batch_size} has too few epochs")
        return ends

    def _interpolated_validation(self, batch_size: int) -> tuple[int, ...]:
        sizes = sorted(self.validation)
        i = bisect.bisect_left(sizes, batch_size)
        i = min(max(i, 1), len(sizes) - 1)
        b0, b1 = sizes[i - 1], sizes[i]
        w = (math.log(batch_size) - math.log(b0)) / (math.log(b1) - math.log(b0))
        out: list[int] = []
        for it0, it1 in zip(self.validation[b0], self.validation[b1], strict=False):
            value = math.exp(math.log(it0) + (math.log(it1) - math.log(it0)) * w)
            out.append(max(round(value), (out[-1] + 1) if out else 1))
        return tuple(out)


def load_traces(
    data_dir: Path, applications: set[str] | None = None
) -> dict[str, ApplicationTrace]:
    """Every application folder under ``data_dir/traces`` (or just those named)."""
    root = data_dir / "traces"
    if not root.is_dir():
        raise FileNotFoundError(f"no traces folder at {root}")
    traces: dict[str, ApplicationTrace] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if applications is None or folder.name in applications:
            traces[folder.name] = ApplicationTrace.load(folder)
    return traces
