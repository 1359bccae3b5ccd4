"""Workload variants generated at run time: does a policy hold beyond workloads 1-4?

Each family derives one variant of every base workload, deterministically
(fixed seeds), from the base workloads alone; nothing is written to disk:

* ``arrivals-0.75x`` / ``arrivals-1.5x``: every arrival time scaled (the same
  jobs arriving faster or slower, so the cluster is busier or idler);
* ``resampled``: the same arrival times, each job's (application, replicas,
  batch size) drawn with replacement from all base jobs, seed 1000 + k;
* ``long-2x``: twice the base workload's share of long jobs (a long job runs
  at least ``LONG_JOB_S`` alone at its requested size, packed), by replacing
  randomly chosen short jobs with jobs drawn from all long base jobs (seed 2000 + k).

``HELD_OUT`` families are built the same way with other arrival scales and
other seeds. No parameter was chosen on them and no target applies to them:
they are where a rule adopted on the families above is checked for
overfitting (``bench.policies --held-out``): ``arrivals-0.6x``,
``arrivals-1.25x``, ``arrivals-2x``; ``resampled-b`` and ``resampled-c``
(seeds 1010 + k and 1020 + k), ``long-2x-b`` (seed 2010 + k) and
``resampled-arrivals-1.5x`` (seed 1030 + k, arrivals x 1.5).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from trainscaler_sim.trace.traces import ApplicationTrace
from trainscaler_sim.trace.workload import WorkloadJob

# A job running at least this long alone (requested size, packed) is "long".
LONG_JOB_S = 3 * 3600.0
FAMILIES = ("arrivals-0.75x", "arrivals-1.5x", "resampled", "long-2x")
HELD_OUT = (
    "arrivals-0.6x",
    "arrivals-1.25x",
    "arrivals-2x",
    "resampled-b",
    "resampled-c",
    "long-2x-b",
    "resampled-arrivals-1.5x",
)
# family: (how jobs are mixed, seed offset, arrival scale)
_SPECS: dict[str, tuple[str, int, float]] = {
    "arrivals-0.75x": ("same", 0, 0.75),
    "arrivals-1.5x": ("same", 0, 1.5),
    "resampled": ("resampled", 0, 1.0),
    "long-2x": ("long", 0, 1.0),
    "arrivals-0.6x": ("same", 0, 0.6),
    "arrivals-1.25x": ("same", 0, 1.25),
    "arrivals-2x": ("same", 0, 2.0),
    "resampled-b": ("resampled", 10, 1.0),
    "resampled-c": ("resampled", 20, 1.0),
    "long-2x-b": ("long", 10, 1.0),
    "resampled-arrivals-1.5x": ("resampled", 30, 1.5),
}

Variant = Callable[[str, Sequence[WorkloadJob]], tuple[WorkloadJob, ...]]


def standalone_s(job: WorkloadJob, trace: ApplicationTrace, *, gpus_per_node: int = 4) -> float:
    """Seconds the job runs alone at its requested size, packed on the fewest nodes."""
    replicas = min(job.requested_replicas, trace.max_replicas(job.batch_size))
    full, rest = divmod(replicas, gpus_per_node)
    placement = [gpus_per_node] * full + ([rest] if rest else [])
    return trace.epoch_ends(job.batch_size)[-1] * trace.iteration_time(placement, job.batch_size)


def _scaled(factor: float) -> Variant:
    def scale(_: str, jobs: Sequence[WorkloadJob]) -> tuple[WorkloadJob, ...]:
        return tuple(replace(job, arrival_s=job.arrival_s * factor) for job in jobs)

    return scale


def _mix(job: WorkloadJob, like: WorkloadJob, *, index: int) -> WorkloadJob:
    return replace(
        job,
        name=f"{like.application}-v{index}",
        application=like.application,
        requested_replicas=like.requested_replicas,
        batch_size=like.batch_size,
    )


def variant_family(
    family: str,
    base: Mapping[str, Sequence[WorkloadJob]],
    *,
    traces: Mapping[str, ApplicationTrace],
    long_job_s: float = LONG_JOB_S,
) -> dict[str, tuple[WorkloadJob, ...]]:
    """One variant of each base workload (label ``<family>/w<k>``)."""
    spec = _SPECS.get(family)
    if spec is None:
        known = ", ".join((*FAMILIES, *HELD_OUT))
        raise ValueError(f"unknown variant family {family!r}; known: {known}")
    mixing, offset, scale = spec
    pool = [job for label in sorted(base) for job in base[label]]
    out: dict[str, tuple[WorkloadJob, ...]] = {}
    for label in sorted(base):
        jobs = sorted(base[label], key=lambda j: (j.arrival_s, j.name))
        seed = offset + (int(label) if label.isdigit() else sum(map(ord, label)))
        varied: tuple[WorkloadJob, ...] = tuple(jobs)
        if mixing == "resampled":
            rng = random.Random(1000 + seed)
            varied = tuple(_mix(job, rng.choice(pool), index=i) for i, job in enumerate(jobs))
        elif mixing == "long":
            rng = random.Random(2000 + seed)

            def is_long(job: WorkloadJob) -> bool:
                return standalone_s(job, traces[job.application]) >= long_job_s

            long_pool = [job for job in pool if is_long(job)]
            short = [i for i, job in enumerate(jobs) if not is_long(job)]
            extra = min(len(jobs) - len(short), len(short))
            chosen = set(rng.sample(short, extra))
            varied = tuple(
                _mix(job, rng.choice(long_pool), index=i) if i in chosen else job
                for i, job in enumerate(jobs)
            )
        if scale != 1.0:
            varied = _scaled(scale)(label, varied)
        out[f"{family}/w{label}"] = varied
    return out
