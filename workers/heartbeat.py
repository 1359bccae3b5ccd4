"""The worker's liveness heartbeat: a small file its main process rewrites every few seconds.

Liveness must not depend on the broker: ``celery inspect ping`` goes through
Redis, so as a liveness probe it restarted every worker whenever Redis
blipped (issue 16). Instead a thread of the worker's *main* process (the one
that owns the pool and the consumer) rewrites ``Settings.heartbeat_file``
while the worker runs, and the pod's exec probe (``trainscaler healthcheck
--max-age S``) checks only how old the file is. Readiness stays the broker
round trip (``celery inspect ping``): a worker cut off from Redis is taken out
of nothing and restarted by nobody; it reconnects on its own.

The thread stops writing when the worker leaves its running state (a shutdown
that hangs) or when the process's main thread has ended, so the probe then
fails and the kubelet restarts the container.

``HeartbeatStep`` plugs the heartbeat into Celery's worker blueprint
(``workers.celery_app`` adds it when ``heartbeat_file`` is set); ``Heartbeat``
itself is plain and usable by any long-running process: ``beating`` wraps the
planner's standby wait for its Lease, so a standby stays live too.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import bootsteps

Clock = Callable[[], float]


class Heartbeat:
    """Rewrites ``path`` with the current time every ``interval`` seconds while ``alive()``."""

    def __init__(
        self,
        path: Path,
        *,
        interval: float,
        clock: Clock = time.time,
        alive: Callable[[], bool] = lambda: True,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"heartbeat interval must be positive, got {interval}")
        self.path = path
        self.interval = interval
        self._clock = clock
        self._alive = alive
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Write one heartbeat atomically (a reader never sees a half-written file)."""
        record = json.dumps({"pid": os.getpid(), "at": self._clock()})
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        partial.write_text(record)
        os.replace(partial, self.path)

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not (self._alive() and threading.main_thread().is_alive()):
                return  # stale from now on: the probe fails, the kubelet restarts us
            # A full or missing /tmp: the file goes stale and the probe says so.
            with contextlib.suppress(OSError):
                self.beat()
            self._stopped.wait(self.interval)

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.beat()  # fresh from the first moment, before the broker is even reached
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1.0)
            self._thread = None


@contextmanager
def beating(path: str, *, interval: float) -> Iterator[None]:
    """Beat while a process waits outside a Celery worker; no-op when ``path`` is empty.

    For the planner's standby (``trainscaler planner`` waiting for its Lease):
    wrap the wait, and the worker's own ``HeartbeatStep`` takes over once it runs.
    """
    if not path:
        yield
        return
    heartbeat = Heartbeat(Path(path), interval=interval)
    heartbeat.start()
    try:
        yield
    finally:
        heartbeat.stop()


def heartbeat_age(path: Path, *, now: float) -> float | None:
    """Seconds since the last heartbeat in ``path``; None when there is none readable."""
    try:
        record = json.loads(path.read_text())
        at = float(record["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return max(0.0, now - at)


class HeartbeatStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """A worker bootstep: the heartbeat runs from before the consumer connects until stop.

    It starts before the consumer (the consumer is the blueprint's last step and
    blocks in its event loop), so a worker that cannot reach Redis still beats.
    """

    label = "Heartbeat"
    path: Path = Path()
    interval: float = 5.0

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._heartbeat: Heartbeat | None = None

    def start(self, parent: Any) -> None:
        blueprint = parent.blueprint
        self._heartbeat = Heartbeat(
            self.path,
            interval=self.interval,
            alive=lambda: blueprint.state == bootsteps.RUN,
        )
        self._heartbeat.start()

    def stop(self, parent: Any) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None

    terminate = stop


def heartbeat_step(path: Path, *, interval: float) -> type[HeartbeatStep]:
    """A ``HeartbeatStep`` bound to one file and interval (Celery instantiates steps itself)."""
    return type("BoundHeartbeatStep", (HeartbeatStep,), {"path": path, "interval": interval})
