"""Benchmark: every compared policy on workloads 1-4, and the acceptance ratios.

Runs ``static``, ``edl``, ``throughput``, ``tiresias`` and ``goodput`` through
the trace-driven simulator (16 nodes x 4 GPUs, 60 s interval, 30 s restarts,
seed 0: reproducible) and prints the average JCT table and, per workload,
``goodput``'s ratio to each baseline, with the geometric means the issue's
acceptance is stated in:

* goodput <= 0.90 x tiresias, <= 0.85 x the better of edl and throughput,
  <= 0.6 x static (geometric means over workloads 1-4);
* goodput no slower than tiresias on any single workload.

Run: ``.venv/bin/python -m bench.policies [--data-dir PATH] [--noise 0.0]``.
Exit code 0 when the acceptance holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.trace.engine import SimConfig
from sim.trace.runner import (
    COMPARED_POLICIES,
    Matrix,
    default_data_dir,
    geometric_mean,
    run_matrix,
    workload_label,
)

WORKLOADS = ("1", "2", "3", "4")
TARGETS = {"tiresias": 0.90, "edl|throughput": 0.85, "static": 0.60}


def ratios(matrix: Matrix, workloads: list[str]) -> dict[str, list[float]]:
    """goodput's avg JCT over each baseline's, per workload."""
    out: dict[str, list[float]] = {}
    for baseline in ("tiresias", "edl|throughput", "static"):
        values = []
        for w in workloads:
            reference = min(matrix.avg_jct(name, w) for name in baseline.split("|"))
            values.append(matrix.avg_jct("goodput", w) / reference)
        out[baseline] = values
    return out


def report(matrix: Matrix, workloads: list[str]) -> tuple[str, bool]:
    lines = ["| policy | " + " | ".join(f"w{w}" for w in workloads) + " |"]
    lines.append("|---|" + "---|" * len(workloads))
    for policy in COMPARED_POLICIES:
        cells = [f"{matrix.avg_jct(policy, w):.0f}" for w in workloads]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "| goodput / baseline | "
        + " | ".join(f"w{w}" for w in workloads)
        + " | geo-mean | target |"
    )
    lines.append("|---|" + "---|" * (len(workloads) + 2))
    ok = True
    for baseline, values in ratios(matrix, workloads).items():
        mean = geometric_mean(values)
        target = TARGETS[baseline]
        passed = mean <= target
        ok = ok and passed
        ratio_cells = " | ".join(f"{v:.3f}" for v in values)
        verdict = "ok" if passed else "MISSED"
        lines.append(f"| {baseline} | {ratio_cells} | {mean:.3f} | <= {target} {verdict} |")
    worst = max(ratios(matrix, workloads)["tiresias"])
    never_slower = worst <= 1.0
    ok = ok and never_slower
    lines.append("")
    lines.append(
        f"worst single-workload ratio to tiresias: {worst:.3f} "
        f"({'ok' if never_slower else 'MISSED'}: must be <= 1)"
    )
    rescales = {
        s.policy: s.rescales_per_job for s in matrix.summaries() if s.workload == workloads[0]
    }
    lines.append(
        "rescales per job on w"
        + workloads[0]
        + ": "
        + ", ".join(f"{p} {r:.2f}" for p, r in rescales.items())
    )
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--placement",
        choices=("kube", "ideal"),
        default="kube",
        help="kube: pods placed as deploy/kube-scheduler-config.yaml does; ideal: best packing",
    )
    args = parser.parse_args(argv)
    paths = [args.data_dir / "workloads" / f"workload-{w}.csv" for w in WORKLOADS]
    config = SimConfig(seed=args.seed, noise=args.noise, placement=args.placement)
    matrix = run_matrix(paths, COMPARED_POLICIES, data_dir=args.data_dir, config=config)
    text, ok = report(matrix, [workload_label(p) for p in paths])
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
