"""Soak benchmark: Redis memory stays flat once the retention of finished jobs passes.

One run against an embedded redis-server on a free loopback port: 2,000
short-lived jobs send 100,000 epoch reports in all (50 each), ``--active`` of
them at a time. Each report takes the runtime's own path in-process (the
handlers the Celery tasks call: accept the report, ``schedule``, apply the
scale with the recording scaler); a job that sent its last report is finished
(``finish``), and the periodic lease sweep (which purges finished jobs past
their retention) runs every ``--sweep-every`` reports, as beat would run it.
The retention is short (``--retention`` seconds, wall clock) so it passes
many times within the run.

The recording scaler stands in for the Kubernetes API: its per-job replica
counts and its log of applied calls are what the API server would hold, not
trainscaler's state, so the benchmark drops a job's entries when it finishes
and trims the log (as deleting the ElasticJob would). Everything else stays.

Redis ``used_memory`` is sampled at each checkpoint. Target: after the first
retention window, memory is flat: the median of the last quarter of the
samples is at most 10% (+ 256 KiB) above the median of the second quarter.
Exit 1 when memory keeps growing. Run: ``.venv/bin/python -m bench.soak``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scheduler_core.models import EpochReport, TrainRequest
from workers import handlers
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import JobRecord
from workers.settings import Settings
from workers.wiring import Runtime

GROWTH_LIMIT = 1.10
GROWTH_SLACK_BYTES = 256 * 1024


@dataclass(frozen=True)
class Sample:
    reports: int
    seconds: float
    used_memory: int
    jobs_listed: int
    keys: int


def _job_name(index: int) -> str:
    return f"soak/job-{index:05d}"


def _record(job: str, now: float) -> JobRecord:
    request = TrainRequest.model_validate(
        {"namespace": "soak", "model_type": "soak", "batch_size": 32, "epochs": 50, "dataset": "d"}
    )
    return JobRecord(
        job=job, job_id=job.split("/")[1], policy="throughput", request=request, created_at=now
    )


def _drive(rt: Runtime, *, jobs: int, reports_per_job: int, active: int, sweep_every: int,
           samples: int) -> list[Sample]:  # fmt: skip
    sent: Counter[str] = Counter()
    pending_starts = list(range(jobs))
    running: list[str] = []
    total = jobs * reports_per_job
    checkpoint = max(1, total // samples)
    started = time.monotonic()
    out: list[Sample] = []
    reports = 0
    while pending_starts or running:
        while len(running) < active and pending_starts:
            job = _job_name(pending_starts.pop(0))
            rt.store.save_job(_record(job, rt.clock.now()))
            running.append(job)
        for job in list(running):
            sent[job] += 1
            report = EpochReport(
                job=job, replicas=2, epoch=sent[job], epoch_time_s=10.0 + sent[job] % 3
            )
            handlers.accept_report(rt, report.model_dump(mode="json"))
            reports += 1
            if reports % sweep_every == 0:
                handlers.sweep_leases(rt)
            if reports % checkpoint == 0:
                out.append(_sample(rt, reports, time.monotonic() - started))
        _schedule_and_scale(rt)
        for job in [j for j in running if sent[j] >= reports_per_job]:
            running.remove(job)
            handlers.finish_job(rt, job)
            _forget_in_stand_in(rt, job)
    return out


def _schedule_and_scale(rt: Runtime) -> None:
    commands: list[handlers.ScaleCommand] = []
    while True:
        summary = handlers.schedule_once(rt, send_scales=commands.extend)
        if not summary.more:
            break
    rt.store.clear_flag(handlers.SCHEDULE_FLAG)
    if commands:
        handlers.apply_scales(rt, commands)


def _forget_in_stand_in(rt: Runtime, job: str) -> None:
    """What deleting the ElasticJob does to the Kubernetes stand-in (see the docstring)."""
    prefix = rt.settings.redis_key_prefix
    pipe = rt.redis.pipeline(transaction=False)
    pipe.hdel(f"{prefix}recording:replicas", job)
    pipe.hdel(f"{prefix}recording:confirmed", job)
    pipe.ltrim(f"{prefix}recording:applied", -100, -1)
    pipe.execute()


def _sample(rt: Runtime, reports: int, seconds: float) -> Sample:
    info = rt.redis.info("memory")
    return Sample(
        reports=reports,
        seconds=seconds,
        used_memory=int(info["used_memory"]),
        jobs_listed=len(rt.store.job_names()),
        keys=int(rt.redis.dbsize()),
    )


def _key_families(rt: Runtime) -> Counter[str]:
    """Keys by family (the job part cut out): what is left at the end."""
    families: Counter[str] = Counter()
    for raw in rt.redis.scan_iter(count=1000):
        key = raw.decode()
        parts = key.split(":")
        if len(parts) > 2 and parts[1] == "job":
            parts[2] = "<job>"
        families[":".join(parts)] += 1
    return families


def verdict(samples: list[Sample]) -> tuple[bool, int, int]:
    """(flat, plateau bytes, end bytes): the last quarter against the second quarter."""
    quarter = max(1, len(samples) // 4)
    plateau = int(statistics.median(s.used_memory for s in samples[quarter : 2 * quarter]))
    end = int(statistics.median(s.used_memory for s in samples[-quarter:]))
    return end <= plateau * GROWTH_LIMIT + GROWTH_SLACK_BYTES, plateau, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--reports-per-job", type=int, default=50)
    parser.add_argument("--active", type=int, default=40, help="jobs running at a time")
    parser.add_argument("--retention", type=float, default=5.0, help="seconds (wall clock)")
    parser.add_argument("--sweep-every", type=int, default=500, help="reports between sweeps")
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args(argv)

    with (
        tempfile.TemporaryDirectory(prefix="trainscaler-soak-") as folder,
        EmbeddedRedis(data_dir=Path(folder)) as server,
    ):
        settings = Settings(
            redis_url=server.url,
            scaler="recording",
            job_retention=args.retention,
            discover=False,
        )
        rt = Runtime(settings)
        empty = int(rt.redis.info("memory")["used_memory"])
        samples = _drive(
            rt,
            jobs=args.jobs,
            reports_per_job=args.reports_per_job,
            active=args.active,
            sweep_every=args.sweep_every,
            samples=args.samples,
        )
        families = _key_families(rt)
        rt.redis.close()

    total = args.jobs * args.reports_per_job
    print(
        f"soak: {total} reports over {args.jobs} jobs ({args.active} at a time), "
        f"retention {args.retention:g} s, sweep every {args.sweep_every} reports"
    )
    print(f"  empty redis used_memory: {empty / 1024:.0f} KiB")
    print(
        f"  {'reports':>8} {'seconds':>8} {'used_memory KiB':>16} {'jobs listed':>12} {'keys':>6}"
    )
    for s in samples:
        print(
            f"  {s.reports:>8} {s.seconds:>8.1f} {s.used_memory / 1024:>16.0f} "
            f"{s.jobs_listed:>12} {s.keys:>6}"
        )
    print("  keys left at the end, by family:")
    for family, count in sorted(families.items(), key=lambda item: -item[1])[:12]:
        print(f"    {count:>6}  {family}")
    flat, plateau, end = verdict(samples)
    print(
        f"  plateau (2nd quarter median): {plateau / 1024:.0f} KiB; "
        f"end (last quarter median): {end / 1024:.0f} KiB; ratio {end / plateau:.3f} "
        f"(target <= {GROWTH_LIMIT:.2f} + {GROWTH_SLACK_BYTES // 1024} KiB)"
    )
    print(f"  {'PASS' if flat else 'FAIL'}: memory {'flat' if flat else 'keeps growing'}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
