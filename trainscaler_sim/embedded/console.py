"""The foreground of ``trainscaler run``: signals, output, and the wait until it stops.

``Stopper`` is set by SIGINT / SIGTERM (installed by ``stop_on_signals``), by
``--duration`` or by a child that died on its own. ``watch`` keeps the live
table (or the plain change lines) up to date until then and returns the exit
code: 0 for a requested stop, 1 when a child died.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live

from trainscaler_sim.embedded.driver import JobDriver
from trainscaler_sim.embedded.supervisor import Supervisor
from trainscaler_sim.embedded.table import JobsLayout, StatusPoller, change_lines, render_table

Say = Callable[[str], None]
_TICK_SECONDS = 0.5


@dataclass
class Stopper:
    event: threading.Event = field(default_factory=threading.Event)
    reason: str = ""

    def stop(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


@contextmanager
def stop_on_signals(stopper: Stopper, supervisor: Supervisor) -> Iterator[None]:
    """SIGINT and SIGTERM stop the run (and cut short any start-up wait)."""

    def handle(signum: int, _frame: Any) -> None:
        stopper.stop(signal.Signals(signum).name)
        supervisor.cancel.set()

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def quiet(_line: str) -> None:
    return None


def printer(console: Console, *, table: bool) -> Say:
    """Lines through rich next to the live table; plain flushed lines otherwise."""

    def say(line: str) -> None:
        if table:
            console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    return say


def closing_line(report: Mapping[str, Any]) -> str:
    jobs = list(report["jobs"].values())
    scaled = sum(1 for job in jobs if job["scale_events"] > 0)
    return (
        f"summary: {report['autoscale_runs']} autoscale runs, {scaled}/{len(jobs)} "
        f"jobs scaled, dead letters: {report['dead_letters']}"
    )


@dataclass
class Watch:
    """What ``watch`` looks at."""

    supervisor: Supervisor
    stopper: Stopper
    driver: JobDriver | None
    poller: StatusPoller | None
    urls: Mapping[str, str]
    began: float
    layout: JobsLayout
    duration: float | None = None


def watch(
    w: Watch,
    *,
    table: bool,
    console: Console,
    say: Say,
    monotonic: Callable[[], float] = time.monotonic,
) -> int:
    """Show the jobs until the run is stopped; the exit code."""
    previous: dict[str, tuple[Any, ...]] = {}
    exit_code = 0

    def tick() -> bool:
        nonlocal exit_code
        if w.duration is not None and monotonic() - w.began >= w.duration:
            w.stopper.stop(f"duration {w.duration:.0f}s reached")
        dead = w.supervisor.dead()
        if dead and not w.stopper.event.is_set():
            names = ", ".join(f"{c.name} (exit {c.process.returncode})" for c in dead)
            say(f"error: {names} stopped on its own; see {w.supervisor.log_dir}")
            w.stopper.stop("a child died")
            exit_code = 1
        return w.stopper.event.wait(_TICK_SECONDS)

    if table and w.poller is not None:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            while True:
                elapsed = monotonic() - w.began
                live.update(
                    render_table(w.poller.status(), layout=w.layout, urls=w.urls, elapsed_s=elapsed)
                )
                if tick():
                    break
        console.print()
    else:
        while True:
            if w.driver is not None:
                for line in change_lines(w.driver.views(), previous):
                    say(line)
            if tick():
                break
    say(f"stopping: {w.stopper.reason}")
    return exit_code
