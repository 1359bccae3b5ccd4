"""Benchmark: end-to-end epoch reports per second, latency at a fixed rate, Redis round trips.

One run, one broker (an embedded redis-server on a free port), real
``celery -A workers worker`` processes (solo pool, one process each), and two
ways in for a report, measured side by side:

* ``api``: what ``POST /job`` does (``workers.intake.accept_report``, called
  here in-process without the HTTP layer): one Lua call pushes the report into
  the SchedulerQueue with a reply key, the API's Celery producer triggers
  ``schedule`` when no run is on its way, and the API takes the answer off its
  reply key (one ``BLPOP`` per report, done here once the run is over: every
  answer must be there, none lost);
* ``celery``: ``trainscaler.report_epoch`` sent with ``send_task``, the
  route for services that speak Celery (one hop into the same call).

For each worker count:

* ceiling: throughput of a no-op Celery task (``trainscaler.noop``);
* throughput: reports per second end to end, enqueued -> the policy's
  decision in ``schedule`` -> the scaler call in ``scale`` (the recording
  scaler timestamps each applied call), and its ratio to the ceiling;
* latency: p50 / p99 from enqueue to scaler call at a fixed offered rate;
* round trips: requests the runtime's Redis read from all its clients during
  the run (its own ``total_reads_processed``: one per command, pipeline or
  script call, whoever sent it), per report. The recording stand-ins for
  Kubernetes (scaler and cluster reader) and this benchmark's polls of what
  they applied use a second Redis (``Settings.recording_redis_url``): in
  production those are Kubernetes requests, not Redis round trips.

Targets (the ``api`` path; each worker count): >= 0.8 x the ceiling, p99 <=
20 ms at 200 reports/s, <= 10 Redis round trips per report in both runs.
Exits 1 when one is missed. Run: ``.venv/bin/python -m bench.events``
(``--help`` for sizes).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis
from celery import Celery

from scheduler_core.models import EpochReport
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_server import EmbeddedRedis
from workers.celery_app import create_app
from workers.client import CeleryClient
from workers.intake import accept_report, new_reply_key
from workers.settings import Settings
from workers.wiring import Runtime

REPO = Path(__file__).resolve().parents[1]
PREFIX = DEFAULT_KEY_PREFIX
APPLIED = f"{PREFIX}recording:applied"

MIN_RATIO = 0.8
MAX_P99_MS = 20.0
MAX_ROUND_TRIPS = 10.0


@dataclass(frozen=True)
class Figures:
    path: str
    workers: int
    ceiling_per_s: float
    reports_per_s: float
    rate: float
    p50_ms: float
    p99_ms: float
    trips_throughput: float
    trips_paced: float
    # Answers found on the reply keys / reports sent with one (api path only).
    answered: int = 0
    asked: int = 0

    @property
    def ratio(self) -> float:
        return self.reports_per_s / self.ceiling_per_s if self.ceiling_per_s else 0.0

    def misses(self) -> list[str]:
        """The targets this run missed (only the API's path has targets)."""
        if self.path != "api":
            return []
        missed = []
        if self.ratio < MIN_RATIO:
            missed.append(f"ratio {self.ratio:.2f} < {MIN_RATIO}")
        if self.p99_ms > MAX_P99_MS:
            missed.append(f"p99 {self.p99_ms:.1f} ms > {MAX_P99_MS:.0f} ms")
        worst = max(self.trips_throughput, self.trips_paced)
        if worst > MAX_ROUND_TRIPS:
            missed.append(f"{worst:.2f} round trips per report > {MAX_ROUND_TRIPS:.0f}")
        if self.answered != self.asked:
            missed.append(f"{self.asked - self.answered} decisions never answered")
        return missed


class ReportPath(Protocol):
    name: str

    def send(self, job: str) -> None:
        """Hand one first-contact report for ``job`` to the runtime."""

    def collect(self) -> tuple[int, int]:
        """Take the answers of what was sent since the last call: (answered, asked)."""


def _first_contact(job: str) -> EpochReport:
    # KubeML CreateTask: the policy decides 1 replica, the scaler applies it.
    return EpochReport(job=job, replicas=0, epoch=0)


@dataclass
class ApiPath:
    """``POST /job``'s own calls: the push with a reply key, the trigger, the answer."""

    rt: Runtime
    producer: CeleryClient
    name: str = "api"
    replies: list[str] = field(default_factory=list)

    def send(self, job: str) -> None:
        reply_to = new_reply_key(self.rt)
        self.replies.append(reply_to)
        accept_report(
            self.rt, _first_contact(job), trigger=self.producer.schedule, reply_to=reply_to
        )

    def collect(self) -> tuple[int, int]:
        # One BLPOP per report, as the API waits: every answer is there by now.
        answered = sum(1 for key in self.replies if self.rt.redis.blpop([key], timeout=5))
        asked = len(self.replies)
        self.replies.clear()
        return answered, asked


@dataclass
class CeleryPath:
    """A Celery producer's ``trainscaler.report_epoch``."""

    app: Celery
    name: str = "celery"

    def send(self, job: str) -> None:
        payload = _first_contact(job).model_dump(mode="json", exclude_none=True)
        self.app.send_task("trainscaler.report_epoch", args=[payload])

    def collect(self) -> tuple[int, int]:
        return 0, 0


def _wait(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``predicate`` until true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def _reads(client: redis.Redis) -> int:
    """Requests Redis has read from all its clients: one per round trip (a command,
    a pipeline or a script call), as counted by the server itself."""
    return int(client.info("stats")["total_reads_processed"])


@contextmanager
def _workers(count: int, env: dict[str, str], *, logs: Path) -> Iterator[None]:
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


def _warm_up(app: Celery, *, workers: int) -> None:
    """Every worker is consuming once a burst of no-ops finishes quickly."""
    results = [app.send_task("trainscaler.noop") for _ in range(workers * 20)]
    for result in results:
        result.get(timeout=60)


def _ceiling(app: Celery, client: redis.Redis, *, messages: int) -> float:
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


def _applied(client: redis.Redis) -> list[dict[str, object]]:
    return [json.loads(x) for x in client.lrange(APPLIED, 0, -1)]


@dataclass(frozen=True)
class Run:
    """One run's figures: per-report latencies (ms) or throughput, round trips, answers."""

    value: float
    latencies: list[float]
    trips: float
    answered: int
    asked: int


@dataclass(frozen=True)
class Redises:
    """The runtime's Redis (its round trips are counted) and the stand-ins' own."""

    runtime: redis.Redis
    stand_ins: redis.Redis


def _throughput(path: ReportPath, redises: Redises, *, messages: int, tag: str) -> Run:
    """Reports per second end to end, and Redis round trips per report."""
    client, stand_ins = redises.runtime, redises.stand_ins
    stand_ins.delete(APPLIED)
    before = _reads(client)
    start = time.time()
    for n in range(messages):
        path.send(f"bench/{tag}-{n}")
    _wait(lambda: stand_ins.llen(APPLIED) >= messages, timeout=300, what="reports applied")
    answered, asked = path.collect()
    # Less the INFO that read the count.
    trips = _reads(client) - before - 1
    last = max(float(str(e["at"])) for e in _applied(stand_ins))
    return Run(messages / (last - start), [], trips / messages, answered, asked)


def _latency(path: ReportPath, redises: Redises, *, rate: float, duration: float, tag: str) -> Run:
    """Latencies (ms) from enqueue to scaler call at a fixed rate, and round trips per report."""
    client, stand_ins = redises.runtime, redises.stand_ins
    stand_ins.delete(APPLIED)
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
        path.send(job)
    _wait(lambda: stand_ins.llen(APPLIED) >= total, timeout=120, what="paced reports applied")
    answered, asked = path.collect()
    trips = _reads(client) - before - 1
    latencies = [
        (float(str(e["at"])) - sent[str(e["job"])]) * 1000.0
        for e in _applied(stand_ins)
        if str(e["job"]) in sent
    ]
    return Run(rate, latencies, trips / total, answered, asked)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[index]


def run(
    *,
    messages: int,
    rate: float,
    duration: float,
    worker_counts: tuple[int, ...],
    paths: tuple[str, ...] = ("api", "celery"),
) -> list[Figures]:
    figures = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-events-") as tmp,
        EmbeddedRedis(data_dir=Path(tmp) / "redis") as server,
        EmbeddedRedis(data_dir=Path(tmp) / "stand-ins") as stand_in_server,
    ):
        env = {
            "TRAINSCALER_REDIS_URL": server.url,
            "TRAINSCALER_RECORDING_REDIS_URL": stand_in_server.url,
            "TRAINSCALER_SCALER": "recording",
            "TRAINSCALER_FAULT_INJECTION": "false",
            "TRAINSCALER_RESULT_EXPIRES": "600",
        }
        settings = Settings(
            redis_url=server.url, recording_redis_url=stand_in_server.url, scaler="recording"
        )
        app = create_app(settings)
        rt = Runtime(settings)
        ways: dict[str, ReportPath] = {
            "api": ApiPath(rt=rt, producer=CeleryClient(settings, app=app)),
            "celery": CeleryPath(app=app),
        }
        client = redis.Redis.from_url(server.url)
        redises = Redises(runtime=client, stand_ins=redis.Redis.from_url(stand_in_server.url))
        try:
            for count in worker_counts:
                client.flushall()
                redises.stand_ins.flushall()
                with _workers(count, env, logs=Path(tmp)):
                    _warm_up(app, workers=count)
                    ceiling = _ceiling(app, client, messages=messages)
                    for name in paths:
                        path = ways[name]
                        tag = f"{name}{count}"
                        loaded = _throughput(path, redises, messages=messages, tag=f"t{tag}")
                        paced = _latency(path, redises, rate=rate, duration=duration, tag=f"l{tag}")
                        figures.append(
                            Figures(
                                path=name,
                                workers=count,
                                ceiling_per_s=ceiling,
                                reports_per_s=loaded.value,
                                rate=rate,
                                p50_ms=statistics.median(paced.latencies),
                                p99_ms=_percentile(paced.latencies, 99),
                                trips_throughput=loaded.trips,
                                trips_paced=paced.trips,
                                answered=loaded.answered + paced.answered,
                                asked=loaded.asked + paced.asked,
                            )
                        )
        finally:
            client.close()
            redises.stand_ins.close()
            rt.redis.close()
            app.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=3000, help="reports per throughput run")
    parser.add_argument("--rate", type=float, default=200.0, help="offered reports/s for latency")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds at the fixed rate")
    parser.add_argument("--workers", default="1,2", help="worker process counts, comma separated")
    parser.add_argument("--paths", default="api,celery", help="ways in: api, celery")
    args = parser.parse_args(argv)
    counts = tuple(int(x) for x in args.workers.split(","))
    paths = tuple(p.strip() for p in args.paths.split(",") if p.strip())
    results = run(
        messages=args.messages,
        rate=args.rate,
        duration=args.duration,
        worker_counts=counts,
        paths=paths,
    )
    print(
        f"{'path':>6} {'workers':>7} {'no-op/s':>9} {'reports/s':>10} {'ratio':>6} "
        f"{'rate/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'trips/report':>12} {'paced':>6} "
        f"{'answered':>9}"
    )
    for f in results:
        answered = f"{f.answered}/{f.asked}" if f.asked else "-"
        print(
            f"{f.path:>6} {f.workers:>7} {f.ceiling_per_s:>9.0f} {f.reports_per_s:>10.0f} "
            f"{f.ratio:>6.2f} {f.rate:>7.0f} {f.p50_ms:>7.1f} {f.p99_ms:>7.1f} "
            f"{f.trips_throughput:>12.2f} {f.trips_paced:>6.2f} {answered:>9}"
        )
    missed = [f"{f.path} x{f.workers}: {m}" for f in results for m in f.misses()]
    print(
        f"targets (api path: >= {MIN_RATIO} x ceiling, p99 <= {MAX_P99_MS:.0f} ms at "
        f"{args.rate:.0f}/s, <= {MAX_ROUND_TRIPS:.0f} Redis round trips per report):",
        "met" if not missed else "NOT met",
    )
    for miss in missed:
        print(f"  missed: {miss}")
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
