"""End-to-end fixtures: ``trainscaler run`` as a real subprocess, and headless Chromium.

``EmbeddedRun`` starts ``trainscaler run --no-table`` in its own session with
a run directory under the test's ``tmp_path`` (every port chosen free),
collects its output on a thread and waits for lines with timeouts. After the
test every process that carries the run directory in its command line or
environment (each child gets ``TRAINSCALER_KUBECONFIG=<run dir>/...``) must
be gone; teardown kills stragglers so one failing test never leaks into the
next.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO.parent / "shared" / "data" / "pollux"
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def processes_mentioning(marker: str) -> list[int]:
    """Pids (not ours) whose command line or environment contains ``marker``."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            status = (entry / "stat").read_text()
            if status.rsplit(")", 1)[-1].split()[0] == "Z":
                continue  # a zombie holds no resources; its parent reaps it
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in blob:
            found.append(int(entry.name))
    return found


def wait_for(predicate: Any, *, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class EmbeddedRun:
    """One ``trainscaler run`` subprocess of a test."""

    def __init__(
        self,
        run_dir: Path,
        *,
        duration: float,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        home: Path | None = None,
    ) -> None:
        self.run_dir = run_dir
        # Where the run leaves its connection details (workers.discovery): under
        # ``home`` as for a user, else a file of this test's own, never the real home.
        if home is not None:
            self.discovery_file = home / ".local" / "state" / "trainscaler" / "embedded.json"
            placement = {"HOME": str(home), "XDG_RUNTIME_DIR": ""}
        else:
            self.discovery_file = run_dir.parent / f"{run_dir.name}-embedded.json"
            placement = {"TRAINSCALER_DISCOVERY_FILE": str(self.discovery_file)}
        self.summary_path = run_dir / "summary.json"
        self.lines: list[str] = []
        self._lock = threading.Lock()
        argv = [
            sys.executable, "-m", "workers.cli", "run", "--no-table",
            "--duration", str(duration), "--api-port", "0", "--flower-port", "0",
            "--run-dir", str(run_dir), "--summary", str(self.summary_path),
            *(extra or []),
        ]  # fmt: skip
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("TRAINSCALER_")}
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**inherited, **placement, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_line(self, pattern: str, *, timeout: float) -> re.Match[str]:
        regex = re.compile(pattern)

        def found() -> re.Match[str] | None:
            with self._lock:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
            if self.process.poll() is not None:
                raise AssertionError(
                    f"trainscaler run exited ({self.process.returncode}) before {pattern!r}:\n"
                    + self.output()[-4000:]
                )
            return None

        match: re.Match[str] = wait_for(found, timeout=timeout, what=f"line {pattern!r}")
        return match

    def wait_exit(self, *, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"trainscaler run still running after {timeout:.0f}s:\n{self.output()[-4000:]}"
            ) from None
        self._reader.join(timeout=10)
        return code

    def summary(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.summary_path.read_text())
        return data

    def leftovers(self) -> list[int]:
        return processes_mentioning(str(self.run_dir))

    def leftovers_after(self, *, timeout: float = 15.0) -> list[int]:
        """Processes of this run still there after up to ``timeout`` seconds (none: [])."""
        deadline = time.monotonic() + timeout
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)  # an exiting process may take a moment to go
        return left

    def kill_everything(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


@pytest.fixture
def embedded_run(tmp_path: Path) -> Iterator[Any]:
    """A factory: ``embedded_run(duration=..., extra=[...], env={...}, home=...)``; killed
    if left running."""
    runs: list[EmbeddedRun] = []

    def start(
        *,
        duration: float,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        home: Path | None = None,
    ) -> EmbeddedRun:
        run = EmbeddedRun(
            tmp_path / f"run{len(runs)}", duration=duration, extra=extra, env=env, home=home
        )
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.process.poll() is None or run.leftovers():
            run.kill_everything()


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


class HeadlessChromium:
    """Debian's chromium, headless, one throwaway profile per test."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def _argv(self, *extra: str) -> list[str]:
        return [
            self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={self.profile}", *extra,
        ]  # fmt: skip

    def dump_dom(self, url: str, *, js_budget_ms: int = 5000, timeout: float = 60) -> str:
        """The page's DOM after its scripts ran (``--virtual-time-budget``)."""
        result = subprocess.run(
            self._argv(f"--virtual-time-budget={js_budget_ms}", "--dump-dom", url),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return result.stdout

    def screenshot(self, url: str, path: Path, *, timeout: float = 60) -> Path:
        subprocess.run(
            self._argv(
                "--virtual-time-budget=5000",
                "--window-size=1400,900",
                "--hide-scrollbars",
                f"--screenshot={path}",
                url,
            ),
            capture_output=True,
            timeout=timeout,
            check=True,
        )
        return path


@pytest.fixture
def chromium(tmp_path: Path) -> HeadlessChromium:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "chromium not found (install Debian's 'chromium' package: apt-get install chromium)"
        )
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    return HeadlessChromium(binary, profile)
