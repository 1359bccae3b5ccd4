"""Benchmark: end-to-end epoch reports per second, and latency at a fixed rate.

One run, one broker (an embedded redis-server on a free port), real
``celery -A workers worker`` processes (solo pool, one process each):

* ceiling: throughput of a no-op Celery task (``trainscaler.noop``) on the
  same broker, with 1 and with 2 worker processes;
* throughput: epoch reports per second end to end — ``report_epoch`` enqueued
  -> the policy's decision in ``schedule`` -> the scaler call in ``scale``
  (the recording scaler timestamps each applied call);
* latency: p50 / p99 from enqueue to scaler call at a fixed offered rate.

Run: ``.venv/bin/python -m bench.events`` (``--help`` for sizes). Prints the
figures and the ratios to the ceiling; targets are >= 0.5 x the ceiling and
p99 <= 100 ms at 200 reports/s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from celery import Celery

from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_server import EmbeddedRedis
from workers.celery_app import create_app
from workers.settings import Settings

REPO = Path(__file__).resolve().parents[1]
PREFIX = DEFAULT_KEY_PREFIX
APPLIED = f"{PREFIX}recording:applied"


@dataclass(frozen=True)
class Figures:
    workers: int
    ceiling_per_s: float
    reports_per_s: float
    rate: float
    p50_ms: float
    p99_ms: float
    round_trips_throughput: float
    round_trips_paced: float

    @property
    def ratio(self) -> float:
        return self.reports_per_s / self.ceiling_per_s if self.ceiling_per_s else 0.0


def _wait(predicate: Callable[[], bool], *, timeout: float, what: str) -> int:
    """Poll ``predicate`` (one Redis command each) until true; returns the polls made."""
    deadline = time.monotonic() + timeout
    polls = 1
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
        polls += 1
    return polls


def _reads(client: redis.Redis) -> int:
    """Requests Redis has read from all its clients: one per round trip (a command,
    a pipeline or a script call), as counted by the server itself."""
    return int(client.info("stats")["total_reads_processed"])


@contextmanager
def _workers(count: int, env: dict[str, str], logs: Path) -> Iterator[None]:
    celery = str(Path(sys.executable).with_name("celery"))
    started: list[subprocess.Popen[bytes]] = []
    try:
        for n in range(count):
            log = logs / f"worker{n}.log"
            with log.open("wb") as out:
                started.append(
                    subprocess.Popen(
                        [
                            celery, "-A", "workers", "worker", "--pool", "solo",
                            "--hostname", f"bench{n}@%h", "--loglevel", "warning",
                            "--without-gossip", "--without-mingle", "--without-heartbeat",
                        ],
                        cwd=REPO, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True,
                    )
                )  # fmt: skip
        yield
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _warm_up(app: Celery, client: redis.Redis, workers: int) -> None:
    """Every worker is consuming once a burst of no-ops finishes quickly."""
    results = [app.send_task("trainscaler.noop") for _ in range(workers * 20)]
    for result in results:
        result.get(timeout=60)
    client.delete(APPLIED)


def _ceiling(app: Celery, client: redis.Redis, messages: int) -> float:
    start = time.time()
    ids = [app.send_task("trainscaler.noop").id for _ in range(messages)]

    def done() -> bool:
        pipe = client.pipeline(transaction=False)
        for task_id in ids[-50:]:
            pipe.exists(f"celery-task-meta-{task_id}")
        return all(pipe.execute()) and _all_done(client, ids)

    _wait(done, timeout=300, what="no-op tasks")
    return messages / (time.time() - start)


def _all_done(client: redis.Redis, ids: list[str]) -> bool:
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.exists(f"celery-task-meta-{task_id}")
    return all(pipe.execute())


def _report(app: Celery, job: str) -> None:
    # A first contact (KubeML CreateTask): the policy decides 1 replica, the scaler applies it.
    app.send_task("trainscaler.report_epoch", args=[{"job": job, "replicas": 0, "epoch": 0}])


def _applied(client: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(x) for x in client.lrange(APPLIED, 0, -1)]


def _throughput(app: Celery, client: redis.Redis, messages: int, tag: str) -> tuple[float, float]:
    """Reports per second end to end, and Redis round trips per report."""
    client.delete(APPLIED)
    before = _reads(client)
    start = time.time()
    for n in range(messages):
        _report(app, f"bench/{tag}-{n}")
    polls = _wait(lambda: client.llen(APPLIED) >= messages, timeout=300, what="reports applied")
    # Less this benchmark's own polls and the INFO that read the count.
    trips = _reads(client) - before - polls - 1
    last = max(float(str(e["at"])) for e in _applied(client))
    return messages / (last - start), trips / messages


def _latency(
    app: Celery, client: redis.Redis, *, rate: float, duration: float, tag: str
) -> tuple[list[float], float]:
    """Latencies (ms) from enqueue to scaler call at a fixed rate, and round trips per report."""
    client.delete(APPLIED)
    before = _reads(client)
    total = int(rate * duration)
    sent: dict[str, float] = {}
    start = time.monotonic()
    for n in range(total):
        due = start + n / rate
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        job = f"bench/{tag}-{n}"
        sent[job] = time.time()
        _report(app, job)
    polls = _wait(lambda: client.llen(APPLIED) >= total, timeout=120, what="paced reports applied")
    trips = _reads(client) - before - polls - 1
    latencies = [
        (float(str(e["at"])) - sent[str(e["job"])]) * 1000.0
        for e in _applied(client)
        if str(e["job"]) in sent
    ]
    return latencies, trips / total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def run(
    *, messages: int, rate: float, duration: float, worker_counts: tuple[int, ...]
) -> list[Figures]:
    figures = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-events-") as tmp,
        EmbeddedRedis(data_dir=Path(tmp) / "redis") as server,
    ):
        env = {
            "TRAINSCALER_REDIS_URL": server.url,
            "TRAINSCALER_SCALER": "recording",
            "TRAINSCALER_FAULT_INJECTION": "false",
            "TRAINSCALER_RESULT_EXPIRES": "600",
        }
        settings = Settings(redis_url=server.url, scaler="recording")
        app = create_app(settings)
        client = redis.Redis.from_url(server.url)
        try:
            for count in worker_counts:
                client.flushall()
                with _workers(count, env, Path(tmp)):
                    _warm_up(app, client, count)
                    ceiling = _ceiling(app, client, messages)
                    reports, trips = _throughput(app, client, messages, f"t{count}")
                    latencies, paced_trips = _latency(
                        app, client, rate=rate, duration=duration, tag=f"l{count}"
                    )
                figures.append(
                    Figures(
                        workers=count,
                        ceiling_per_s=ceiling,
                        reports_per_s=reports,
                        rate=rate,
                        p50_ms=statistics.median(latencies),
                        p99_ms=_percentile(latencies, 99),
                        round_trips_throughput=trips,
                        round_trips_paced=paced_trips,
                    )
                )
        finally:
            client.close()
            app.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=3000, help="tasks per throughput run")
    parser.add_argument("--rate", type=float, default=200.0, help="offered reports/s for latency")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds at the fixed rate")
    parser.add_argument("--workers", default="1,2", help="worker process counts, comma separated")
    args = parser.parse_args(argv)
    counts = tuple(int(x) for x in args.workers.split(","))
    results = run(
        messages=args.messages, rate=args.rate, duration=args.duration, worker_counts=counts
    )
    print(
        f"{'workers':>7} {'no-op/s':>9} {'reports/s':>10} {'ratio':>6} "
        f"{'rate/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'trips':>6} {'paced':>6}"
    )
    for f in results:
        print(
            f"{f.workers:>7} {f.ceiling_per_s:>9.0f} {f.reports_per_s:>10.0f} {f.ratio:>6.2f} "
            f"{f.rate:>7.0f} {f.p50_ms:>7.1f} {f.p99_ms:>7.1f} "
            f"{f.round_trips_throughput:>6.1f} {f.round_trips_paced:>6.1f}"
        )
    ok = all(f.ratio >= 0.5 and f.p99_ms <= 100.0 for f in results)
    print("targets (>= 0.5 x ceiling, p99 <= 100 ms):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
