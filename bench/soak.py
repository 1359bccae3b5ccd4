"""Soak benchmark: Redis memory stays flat once the retention of finished jobs passes.

One run against an embedded redis-server on a free loopback port: 2,000
short-lived jobs send 100,000 epoch reports in all (50 each), ``--active`` of
them at a time (a "generation"). Each report takes the runtime's own path in-process (the
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

Redis ``used_memory`` is sampled after each generation of jobs (live and
retained jobs present: it moves with how many jobs finished within the last
retention, so with the machine's speed) and, every ``--settle-every``
generations, once the retention of every finished job has passed and the
sweep has run ("settled"). Target: settled memory is flat: no settled sample
after the first is more than 5% (+ 128 KiB) above the first. Exit 1 when memory
keeps growing. Run: ``.venv/bin/python -m bench.soak``.
"""

from __future__ import annotations

import argparse
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

GROWTH_LIMIT = 1.05
GROWTH_SLACK_BYTES = 128 * 1024


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
           settle_every: int) -> tuple[list[Sample], list[Sample]]:  # fmt: skip
    """Runs the jobs ``active`` at a time; returns (running samples, settled samples).

    A running sample is taken after each generation of ``active`` jobs (live and
    retained jobs present); a settled one every ``settle_every`` generations, once
    the retention of every finished job has passed and the sweep has run.
    """
    started = time.monotonic()
    running_samples: list[Sample] = []
    settled: list[Sample] = []
    reports = 0
    generations = -(-jobs // active)
    for generation in range(generations):
        batch = [
            _job_name(i) for i in range(generation * active, min(jobs, (generation + 1) * active))
        ]
        for job in batch:
            rt.store.save_job(_record(job, rt.clock.now()))
        for epoch in range(1, reports_per_job + 1):
            for job in batch:
                report = EpochReport(
                    job=job, replicas=2, epoch=epoch, epoch_time_s=10.0 + epoch % 3
                )
                handlers.accept_report(rt, report.model_dump(mode="json"))
                reports += 1
                if reports % sweep_every == 0:
                    handlers.sweep_leases(rt)
            _schedule_and_scale(rt)
        for job in batch:
            handlers.finish_job(rt, job)
            _forget_in_stand_in(rt, job)
        running_samples.append(_sample(rt, reports, seconds=time.monotonic() - started))
        if (generation + 1) % settle_every == 0 or generation == generations - 1:
            _settle(rt)
            settled.append(_sample(rt, reports, seconds=time.monotonic() - started))
    return running_samples, settled


def _settle(rt: Runtime) -> None:
    """Wait out the retention of every finished job and let the sweep purge them."""
    deadline = time.monotonic() + rt.retention.retention * 3 + 30
    time.sleep(rt.retention.retention)
    handlers.sweep_leases(rt)
    while rt.retention.finished_count():
        if time.monotonic() > deadline:
            raise TimeoutError("finished jobs were not purged after their retention")
        time.sleep(0.1)
        handlers.sweep_leases(rt)


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


def _sample(rt: Runtime, reports: int, *, seconds: float) -> Sample:
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


def verdict(settled: list[Sample]) -> tuple[bool, int, int]:
    """(flat, first, highest later): settled memory after the first, against the first."""
    first = settled[0].used_memory
    later = max((s.used_memory for s in settled[1:]), default=first)
    return later <= first * GROWTH_LIMIT + GROWTH_SLACK_BYTES, first, later


def _print_samples(title: str, samples: list[Sample]) -> None:
    print(f"  {title}")
    print(
        f"  {'reports':>8} {'seconds':>8} {'used_memory KiB':>16} {'jobs listed':>12} {'keys':>6}"
    )
    for s in samples:
        print(
            f"  {s.reports:>8} {s.seconds:>8.1f} {s.used_memory / 1024:>16.0f} "
            f"{s.jobs_listed:>12} {s.keys:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--reports-per-job", type=int, default=50)
    parser.add_argument("--active", type=int, default=40, help="jobs running at a time")
    parser.add_argument("--retention", type=float, default=2.0, help="seconds (wall clock)")
    parser.add_argument("--sweep-every", type=int, default=500, help="reports between sweeps")
    parser.add_argument("--settle-every", type=int, default=5, help="generations between")
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
        running, settled = _drive(
            rt,
            jobs=args.jobs,
            reports_per_job=args.reports_per_job,
            active=args.active,
            sweep_every=args.sweep_every,
            settle_every=args.settle_every,
        )
        families = _key_families(rt)
        rt.redis.close()

    total = args.jobs * args.reports_per_job
    print(
        f"soak: {total} reports over {args.jobs} jobs ({args.active} at a time), "
        f"retention {args.retention:g} s, sweep every {args.sweep_every} reports"
    )
    print(f"  empty redis used_memory: {empty / 1024:.0f} KiB")
    _print_samples("running (after each generation of jobs: live + retained jobs):", running)
    _print_samples("settled (retention passed, sweep ran):", settled)
    print("  keys left at the end, by family:")
    for family, count in sorted(families.items(), key=lambda item: -item[1])[:12]:
        print(f"    {count:>6}  {family}")
    flat, first, later = verdict(settled)
    peak = max(s.used_memory for s in running)
    print(
        f"  settled used_memory: first {first / 1024:.0f} KiB, highest later "
        f"{later / 1024:.0f} KiB, ratio {later / first:.3f} (target <= {GROWTH_LIMIT:.2f} "
        f"+ {GROWTH_SLACK_BYTES // 1024} KiB); running peak {peak / 1024:.0f} KiB"
    )
    print(f"  {'PASS' if flat else 'FAIL'}: memory {'flat' if flat else 'keeps growing'}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
