"""The process supervisor: starts child processes, waits until each is ready,
notices when one dies, and stops them all, whole process groups included.

Every child runs in its own session (``start_new_session``), so a terminal's
Ctrl-C reaches only ``trainscaler run``, which then stops the children in
reverse start order: ``SIGTERM`` to the child's process group, a bounded wait,
then ``SIGKILL`` to the group. Killing the group (not just the leader) also
ends what a child started itself, such as Celery's pool processes. Each
child's output goes to ``<log_dir>/<name>.log``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainscaler_sim.embedded.ports import port_in_use

ReadyCheck = Callable[[], bool]
_POLL_SECONDS = 0.1


class ChildFailedError(RuntimeError):
    """A child exited early or was not ready in time."""


class StartCancelledError(RuntimeError):
    """``cancel`` was set while waiting for a child (Ctrl-C during start-up)."""


@dataclass(frozen=True)
class ChildSpec:
    """How to start one child and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    ready: ReadyCheck | None = None
    ready_timeout: float = 60.0
    stop_timeout: float = 10.0
    cwd: Path | None = None


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def tcp_ready(port: int, host: str = "127.0.0.1") -> ReadyCheck:
    """Ready once something accepts connections on ``host:port``."""
    return lambda: port_in_use(port, host)


def http_ready(url: str, *, statuses: tuple[int, ...] = (200,)) -> ReadyCheck:
    """Ready once ``GET url`` answers with one of ``statuses``."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                return int(response.status) in statuses
        except urllib.error.HTTPError as error:
            return error.code in statuses
        except (OSError, ValueError):
            return False

    return check


def log_ready(path: Path, text: str) -> ReadyCheck:
    """Ready once the child's log contains ``text`` (Celery's "ready." line)."""

    def check() -> bool:
        try:
            return text in path.read_text(errors="replace")
        except OSError:
            return False

    return check


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervising process dies.

    Covers the one exit the supervisor cannot clean up after: being killed
    with SIGKILL. Async-signal-safe: one ``prctl`` call, no allocation.
    """
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PR_SET_PDEATHSIG = 1
_PRCTL = _load_prctl()


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to process group ``pid``; False when the group is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_alive(pid: int) -> bool:
    """True while any process of group ``pid`` exists (signal 0 probes)."""
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@dataclass
class Supervisor:
    """Children of one ``trainscaler run``, stopped in reverse order."""

    log_dir: Path
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    children: list[Child] = field(default_factory=list)
    # Set from a signal handler: start-up waits stop early instead of running out their timeouts.
    cancel: threading.Event = field(default_factory=threading.Event)

    def start(self, spec: ChildSpec, *, wait: bool = True, log_path: Path | None = None) -> Child:
        """Start ``spec``; with ``wait``, return once it is ready (``ChildFailedError`` if not).

        Without ``wait`` several children start side by side; ``wait_ready`` each after.
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = log_path or self.log_dir / f"{spec.name}.log"
        with path.open("ab") as log:
            process = subprocess.Popen(
                list(spec.argv),
                env=dict(spec.env),
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: the terminal's Ctrl-C does not reach it; we stop it.
                start_new_session=True,
                preexec_fn=_die_with_parent if _PRCTL is not None else None,
            )
        child = Child(spec=spec, process=process, log_path=path, started_at=self.monotonic())
        self.children.append(child)
        if wait:
            self.wait_ready(child)
        return child

    def wait_ready(self, child: Child) -> None:
        check = child.spec.ready
        if check is None:
            return
        deadline = self.monotonic() + child.spec.ready_timeout
        while not check():
            if self.cancel.is_set():
                raise StartCancelledError(f"start-up cancelled while waiting for {child.name}")
            if not child.alive():
                raise ChildFailedError(
                    f"{child.name} exited with code {child.process.returncode} before it was "
                    f"ready; last lines of {child.log_path}:\n{child.log_tail()}"
                )
            if self.monotonic() > deadline:
                raise ChildFailedError(
                    f"{child.name} not ready within {child.spec.ready_timeout:.0f}s; "
                    f"last lines of {child.log_path}:\n{child.log_tail()}"
                )
            self.sleep(_POLL_SECONDS)

    def dead(self) -> list[Child]:
        """Children that exited on their own."""
        return [c for c in self.children if not c.alive()]

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self.children}

    def stop_all(self) -> list[str]:
        """Stop every child, newest first; returns lines describing what it took."""
        notes: list[str] = []
        while self.children:
            child = self.children.pop()
            notes.append(self._stop(child))
        return notes

    def _stop(self, child: Child) -> str:
        pid = child.pid
        signal_group(pid, signal.SIGTERM)
        deadline = self.monotonic() + child.spec.stop_timeout
        while self.monotonic() < deadline:
            # Reap the leader so its group id stops answering once the group is empty.
            child.process.poll()
            if not group_alive(pid):
                return f"{child.name} (pid {pid}) stopped"
            self.sleep(_POLL_SECONDS)
        signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=child.spec.stop_timeout)
        # SIGKILL lands asynchronously: wait (bounded) until the whole group is gone.
        deadline = self.monotonic() + child.spec.stop_timeout
        while group_alive(pid) and self.monotonic() < deadline:
            self.sleep(_POLL_SECONDS)
        return f"{child.name} (pid {pid}) killed after {child.spec.stop_timeout:.0f}s"

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
