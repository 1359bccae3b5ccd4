"""Benchmark: every compared policy on workloads 1-4 and on generated variants.

Runs ``static``, ``edl``, ``throughput``, ``tiresias`` and ``goodput`` through
the trace-driven simulator (16 nodes x 4 GPUs, 60 s interval, 30 s restarts,
Kubernetes-style placement, seed 0: reproducible) on workloads 1-4 and on
every family of ``trainscaler_sim.trace.variants`` (generated at run time from 1-4), and
checks issue 18's acceptance, side by side in one run:

* workloads 1-4: goodput's geomean avg JCT <= 0.77 x tiresias's, no workload
  above 0.90 x, at most 1.2 restarts per job, p99 JCT <= 1.1 x tiresias's;
* every variant family: geomean <= 0.80 x tiresias on the same variants
  (the same parameters everywhere: no per-family tuning);
* sensitivity: every numeric goodput parameter at 0.75 x and 1.25 x its
  default moves the workloads 1-4 geomean by at most 0.03.

``--held-out`` adds the ``HELD_OUT`` families (other arrival scales, other
seeds): reported, never a target, nothing tuned on them; a rule adopted on
the families above should not lose there.

Runs go to a pool of ``--jobs`` processes (arguments and results cross as
JSON). Run: ``.venv/bin/python -m bench.policies [--data-dir PATH] [--jobs 2]
[--no-variants] [--no-sensitivity] [--held-out]``. Exit code 0 when every
target holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler_core.policies.goodput import GoodputParams
from trainscaler_sim.trace.engine import SimConfig, simulate
from trainscaler_sim.trace.results import percentile
from trainscaler_sim.trace.runner import COMPARED_POLICIES, default_data_dir, geometric_mean
from trainscaler_sim.trace.traces import load_traces
from trainscaler_sim.trace.variants import FAMILIES, HELD_OUT, variant_family
from trainscaler_sim.trace.workload import WorkloadJob, load_workload

WORKLOADS = ("1", "2", "3", "4")
BASE = "workloads 1-4"
GEOMEAN_TARGET = 0.77
WORST_TARGET = 0.90
RESTARTS_TARGET = 1.2
P99_TARGET = 1.1
FAMILY_TARGET = 0.80
SENSITIVITY_TARGET = 0.03
# Parameters the sensitivity table leaves out: bounds of the state, not tuning.
NOT_TUNING = {"history", "max_applications", "max_load_desired"}


@dataclass(frozen=True)
class Run:
    """One simulation's numbers."""

    avg_jct_s: float
    p99_jct_s: float
    restarts_per_job: float
    by_application: dict[str, float]


def _workloads(data_dir: Path, families: Sequence[str]) -> dict[str, dict[str, list[WorkloadJob]]]:
    base = {w: list(load_workload(data_dir / "workloads" / f"workload-{w}.csv")) for w in WORKLOADS}
    apps = {job.application for jobs in base.values() for job in jobs}
    traces = load_traces(data_dir, apps)
    out: dict[str, dict[str, list[WorkloadJob]]] = {
        BASE: {f"w{w}": jobs for w, jobs in base.items()}
    }
    for family in families:
        out[family] = {k: list(v) for k, v in variant_family(family, base, traces=traces).items()}
    return out


def _simulate(task_json: str) -> str:
    """One run; JSON in and out (the pool's only traffic)."""
    task = json.loads(task_json)
    data_dir = Path(task["data_dir"])
    families = [task["family"]] if task["family"] != BASE else []
    jobs = _workloads(data_dir, families)[task["family"]][task["workload"]]
    traces = load_traces(data_dir, {job.application for job in jobs})
    config = SimConfig(placement=task["placement"])
    params = task["params"] or None
    result = simulate(jobs, traces, policy=task["policy"], params=params, config=config)
    jcts = sorted(j.jct_s for j in result.jobs if j.jct_s is not None)
    by_app: dict[str, list[float]] = {}
    for job in result.jobs:
        if job.jct_s is not None:
            by_app.setdefault(job.application, []).append(job.jct_s)
    summary = result.summary()
    return json.dumps(
        {
            "avg_jct_s": summary.avg_jct_s,
            "p99_jct_s": percentile(jcts, 99),
            "restarts_per_job": summary.rescales_per_job,
            "by_application": {a: sum(v) / len(v) for a, v in by_app.items()},
        }
    )


def run_all(
    tasks: Sequence[Mapping[str, Any]], *, processes: int
) -> dict[tuple[str, str, str, str], Run]:
    """Every task, keyed by (family, workload, policy, params label)."""
    payloads = [json.dumps(t) for t in tasks]
    if processes > 1:
        with ProcessPoolExecutor(max_workers=processes) as pool:
            outputs = list(pool.map(_simulate, payloads))
    else:
        outputs = [_simulate(p) for p in payloads]
    return {
        (t["family"], t["workload"], t["policy"], t["label"]): Run(**json.loads(o))
        for t, o in zip(tasks, outputs, strict=True)
    }


def sensitivity_variants() -> list[tuple[str, dict[str, Any]]]:
    """(label, goodput params) for every tuning parameter at 0.75x and 1.25x its default."""
    out: list[tuple[str, dict[str, Any]]] = []
    defaults = GoodputParams()
    for name, info in GoodputParams.model_fields.items():
        value = getattr(defaults, name)
        if (
            name in NOT_TUNING
            or isinstance(value, bool)
            or not isinstance(value, int | float)
            or value == 0  # 0.75 x 0 = 1.25 x 0: nothing to vary
        ):
            continue
        for factor in (0.75, 1.25):
            new: float | int = value * factor
            if isinstance(value, int):
                new = round(new)
            meta = info.metadata
            for bound in meta:
                le = getattr(bound, "le", None)
                ge = getattr(bound, "ge", None)
                if le is not None:
                    new = min(new, le)
                if ge is not None:
                    new = max(new, ge)
            out.append((f"{name}={new:g} ({factor}x)", {name: new}))
    return out


def _geo(
    runs: Mapping[tuple[str, str, str, str], Run],
    family: str,
    *,
    names: Sequence[str],
    label: str = "",
) -> float:
    return geometric_mean(
        [
            runs[(family, w, "goodput", label)].avg_jct_s
            / runs[(family, w, "tiresias", "")].avg_jct_s
            for w in names
        ]
    )


def report(
    runs: Mapping[tuple[str, str, str, str], Run],
    workloads: Mapping[str, Sequence[str]],
    *,
    sensitivity: Sequence[str],
) -> tuple[str, bool]:
    lines: list[str] = []
    ok = True
    policies = [
        p
        for p in COMPARED_POLICIES
        if all((f, w, p, "") in runs for f, ws in workloads.items() for w in ws)
    ]
    for family, names in workloads.items():
        lines.append(f"### {family}: average JCT (s)")
        lines.append("| policy | " + " | ".join(names) + " | geomean vs tiresias |")
        lines.append("|---|" + "---|" * (len(names) + 1))
        for policy in policies:
            cells = [f"{runs[(family, w, policy, '')].avg_jct_s:.0f}" for w in names]
            ratio = geometric_mean(
                [
                    runs[(family, w, policy, "")].avg_jct_s
                    / runs[(family, w, "tiresias", "")].avg_jct_s
                    for w in names
                ]
            )
            lines.append(f"| {policy} | " + " | ".join(cells) + f" | {ratio:.3f} |")
        ratios = [
            runs[(family, w, "goodput", "")].avg_jct_s / runs[(family, w, "tiresias", "")].avg_jct_s
            for w in names
        ]
        restarts = [runs[(family, w, "goodput", "")].restarts_per_job for w in names]
        p99 = [
            runs[(family, w, "goodput", "")].p99_jct_s / runs[(family, w, "tiresias", "")].p99_jct_s
            for w in names
        ]
        lines.append("| goodput / tiresias | " + " | ".join(f"{r:.3f}" for r in ratios) + " | |")
        lines.append(
            "| goodput restarts per job | " + " | ".join(f"{r:.2f}" for r in restarts) + " | |"
        )
        lines.append(
            "| goodput p99 / tiresias p99 | " + " | ".join(f"{r:.3f}" for r in p99) + " | |"
        )
        mean = geometric_mean(ratios)
        checks: list[tuple[str, bool]] = []
        if family == BASE:
            checks = [
                (f"geomean {mean:.3f} <= {GEOMEAN_TARGET}", mean <= GEOMEAN_TARGET),
                (
                    f"worst workload {max(ratios):.3f} <= {WORST_TARGET}",
                    max(ratios) <= WORST_TARGET,
                ),
                (
                    f"restarts per job {max(restarts):.2f} <= {RESTARTS_TARGET}",
                    max(restarts) <= RESTARTS_TARGET,
                ),
                (f"p99 ratio {max(p99):.3f} <= {P99_TARGET}", max(p99) <= P99_TARGET),
            ]
        elif family in HELD_OUT:
            lines.append(f"- geomean {mean:.3f} (held out: reported, no target)")
        else:
            checks = [(f"geomean {mean:.3f} <= {FAMILY_TARGET}", mean <= FAMILY_TARGET)]
        for text, passed in checks:
            ok = ok and passed
            lines.append(f"- {text}: {'ok' if passed else 'MISSED'}")
        lines.append("")
    base_names = workloads[BASE]
    apps = sorted({a for w in base_names for a in runs[(BASE, w, "tiresias", "")].by_application})
    lines.append(f"### {BASE}: average JCT per application (s), goodput / tiresias")
    lines.append("| application | " + " | ".join(base_names) + " |")
    lines.append("|---|" + "---|" * len(base_names))
    for app in apps:
        cells = []
        for w in base_names:
            g = runs[(BASE, w, "goodput", "")].by_application.get(app)
            t = runs[(BASE, w, "tiresias", "")].by_application.get(app)
            cells.append("-" if g is None or t is None else f"{g:.0f} / {t:.0f}")
        lines.append(f"| {app} | " + " | ".join(cells) + " |")
    lines.append("")
    if sensitivity:
        default = _geo(runs, BASE, names=base_names)
        lines.append(f"### sensitivity: {BASE} geomean vs tiresias (default {default:.3f})")
        lines.append("| parameter | geomean | change |")
        lines.append("|---|---|---|")
        for label in sensitivity:
            value = _geo(runs, BASE, names=base_names, label=label)
            moved = abs(value - default)
            passed = moved <= SENSITIVITY_TARGET
            ok = ok and passed
            lines.append(
                f"| {label} | {value:.3f} | {value - default:+.3f} {'ok' if passed else 'MISSED'} |"
            )
        lines.append("")
    lines.append(f"acceptance: {'all targets met' if ok else 'MISSED (see above)'}")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--jobs", type=int, default=2, help="simulation processes")
    parser.add_argument("--placement", choices=("kube", "ideal"), default="kube")
    parser.add_argument("--no-variants", action="store_true")
    parser.add_argument("--no-sensitivity", action="store_true")
    parser.add_argument("--held-out", action="store_true", help="also the HELD_OUT families")
    parser.add_argument("--policies", default=",".join(COMPARED_POLICIES))
    args = parser.parse_args(argv)
    families = [] if args.no_variants else list(FAMILIES)
    if args.held_out:
        families += HELD_OUT
    workloads = {
        family: sorted(jobs) for family, jobs in _workloads(args.data_dir, families).items()
    }
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for needed in ("tiresias", "goodput"):
        if needed not in policies:
            policies.append(needed)
    common = {"data_dir": str(args.data_dir), "placement": args.placement}
    tasks: list[dict[str, Any]] = [
        {**common, "family": f, "workload": w, "policy": p, "label": "", "params": {}}
        for f, names in workloads.items()
        for w in names
        for p in policies
    ]
    sensitivity = [] if args.no_sensitivity else sensitivity_variants()
    tasks += [
        {
            **common,
            "family": BASE,
            "workload": w,
            "policy": "goodput",
            "label": label,
            "params": params,
        }
        for label, params in sensitivity
        for w in workloads[BASE]
    ]
    # The longest runs (goodput) first, so the pool ends together.
    tasks.sort(key=lambda t: t["policy"] != "goodput")
    runs = run_all(tasks, processes=max(1, args.jobs))
    text, ok = report(runs, workloads, sensitivity=[label for label, _ in sensitivity])
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
