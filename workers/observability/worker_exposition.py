"""Each worker pod's Prometheus endpoint: one HTTP listener in the worker's main process.

Celery signals drive it (``install_worker_exposition`` connects them; the app
module calls it once):

* ``worker_init`` (main process, before the pool forks): with
  ``PROMETHEUS_MULTIPROC_DIR`` set (prometheus_client's multiprocess mode; it
  must be in the environment before the process starts, an emptyDir in a pod)
  the directory's files from an earlier run are removed. When
  ``Settings.worker_metrics_port`` is set, ``/metrics`` is served there: the
  merge of every pool process's files, or without the directory this
  process's default registry, which is right for the solo pool (the planner)
  and the threads pool only.
* ``worker_process_init`` (each pool process; the main process for solo):
  ``trainscaler_worker_pool_processes`` counts it (a ``livesum`` gauge).
* ``worker_process_shutdown`` (a pool process exiting): ``mark_process_dead``,
  so its live gauges leave the sum; a child killed without that signal is
  found at the next scrape (its pid is gone) and marked dead then.
* ``worker_shutdown``: the listener closes.

``serve`` starts the listener before any worker runs: the planner's standby
(``trainscaler planner`` waiting for its Lease) serves its own ``/metrics``
too, and the worker it then runs in the same process keeps that listener.

Counters and histograms of exited children stay in the directory on purpose:
a counter must not go down when a child is replaced.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from celery import signals
from prometheus_client import REGISTRY, CollectorRegistry, Gauge, start_http_server
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from workers.observability.metrics import NAMESPACE
from workers.settings import Settings

log = logging.getLogger(__name__)

POOL_PROCESSES = f"{NAMESPACE}_worker_pool_processes"


def _pid_of(path: str) -> int | None:
    """The pid in a multiprocess file name (``gauge_livesum_1234.db``)."""
    stem = Path(path).stem
    try:
        return int(stem.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process with that pid: not ours to forget
    return True


class LivePoolCollector(Collector):
    """The multiprocess directory's metrics, with dead processes' live gauges dropped."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        # prometheus_client's multiprocess module is untyped.
        self._merged: Collector = MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]

    def collect(self) -> Iterable[Metric]:
        for path in glob.glob(os.path.join(self._directory, "gauge_live*_*.db")):
            pid = _pid_of(path)
            if pid is not None and not _running(pid):
                mark_process_dead(pid, self._directory)  # type: ignore[no-untyped-call]
        return self._merged.collect()


def remove_stale_files(directory: str) -> int:
    """Delete an earlier run's multiprocess files (an emptyDir outlives a container)."""
    removed = 0
    for path in glob.glob(os.path.join(directory, "*.db")):
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        removed += 1
    return removed


class WorkerExposition:
    """The worker's metrics listener and pool-process bookkeeping, driven by Celery signals."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._directory = settings.prometheus_multiproc_dir
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._processes: Gauge | None = None
        self._prepared = False

    @property
    def enabled(self) -> bool:
        return self._settings.worker_metrics_port > 0

    def registry(self) -> CollectorRegistry:
        """What the endpoint serves: the merged pool files, or this process's registry."""
        if self._directory is None:
            return REGISTRY
        registry = CollectorRegistry(auto_describe=False)
        registry.register(LivePoolCollector(self._directory))
        return registry

    def _prepare_directory(self) -> None:
        """Once per process, before the pool forks: an earlier run's files go."""
        if self._directory is None or self._prepared:
            return
        self._prepared = True
        os.makedirs(self._directory, exist_ok=True)
        remove_stale_files(self._directory)

    def serve(self) -> None:
        """Start the listener, once per process (no-op without a port)."""
        self._prepare_directory()
        if not self.enabled or self._server is not None:
            return
        self._server, self._thread = start_http_server(
            self._settings.worker_metrics_port,
            addr=self._settings.worker_metrics_address,
            registry=self.registry(),
        )
        log.info(
            "worker metrics on http://%s:%d/metrics (%s)",
            self._settings.worker_metrics_address,
            self._settings.worker_metrics_port,
            f"multiprocess: {self._directory}" if self._directory else "this process",
        )

    def on_worker_init(self, sender: Any = None, **_: Any) -> None:
        # Before the pool forks: nothing has written to the directory in this run yet.
        self._prepare_directory()
        if not self.enabled:
            return
        if self._directory is None:
            pool = repr(getattr(sender, "pool_cls", ""))
            concurrency = int(getattr(sender, "concurrency", 1) or 1)
            if concurrency > 1 and "solo" not in pool and "thread" not in pool:
                log.warning(
                    "PROMETHEUS_MULTIPROC_DIR is not set: the metrics of this worker's "
                    "%d pool processes are not exposed, only its main process's",
                    concurrency,
                )
        self.serve()

    def on_process_init(self, **_: Any) -> None:
        if not self.enabled:
            return
        self._processes = Gauge(
            POOL_PROCESSES,
            "Worker pool processes alive (prefork children; the main process for solo).",
            registry=None,  # read from the multiprocess files or, without them, below
            multiprocess_mode="livesum",
        )
        if self._directory is None:
            REGISTRY.register(self._processes)
        self._processes.set(1)

    def on_process_shutdown(self, pid: int | None = None, **_: Any) -> None:
        if self._directory is not None:
            dead = pid if pid is not None else os.getpid()
            mark_process_dead(dead, self._directory)  # type: ignore[no-untyped-call]

    def on_worker_shutdown(self, **_: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def install_worker_exposition(settings: Settings) -> WorkerExposition:
    """Connect the worker's exposition to Celery's signals (weak=False: it lives on)."""
    exposition = WorkerExposition(settings)
    signals.worker_init.connect(exposition.on_worker_init, weak=False)
    signals.worker_process_init.connect(exposition.on_process_init, weak=False)
    signals.worker_process_shutdown.connect(exposition.on_process_shutdown, weak=False)
    signals.worker_shutdown.connect(exposition.on_worker_shutdown, weak=False)
    return exposition
