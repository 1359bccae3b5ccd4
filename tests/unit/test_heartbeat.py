"""The liveness heartbeat (workers/heartbeat.py) and ``trainscaler healthcheck``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from workers.commands import register_all
from workers.heartbeat import Heartbeat, beating, heartbeat_age

TRAINSCALER = [sys.executable, "-c", "from workers.cli import main; main()"]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_beat_records_the_clock_and_age_is_measured_from_it(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    clock = FakeClock(1000.0)
    Heartbeat(path, interval=5, clock=clock).beat()
    assert json.loads(path.read_text())["at"] == 1000.0
    assert heartbeat_age(path, now=1012.5) == 12.5
    assert not list(tmp_path.glob(".*.tmp")), "the temporary file is renamed into place"


@pytest.mark.parametrize("content", [None, "", "{", '{"pid": 1}', '{"at": "soon"}', "[]"])
def test_missing_or_garbled_heartbeat_has_no_age(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "heartbeat"
    if content is not None:
        path.write_text(content)
    assert heartbeat_age(path, now=10.0) is None


def test_the_thread_stops_beating_when_the_worker_leaves_its_running_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "heartbeat"
    running = threading.Event()
    running.set()
    beats = threading.Semaphore(0)
    clock = FakeClock(0.0)

    def counting_clock() -> float:
        beats.release()
        clock.now += 1
        return clock.now

    heartbeat = Heartbeat(path, interval=0.01, clock=counting_clock, alive=running.is_set)
    heartbeat.start()
    thread = heartbeat._thread
    assert thread is not None
    try:
        for _ in range(3):  # it keeps beating on its own
            assert beats.acquire(timeout=10)
        running.clear()
        thread.join(timeout=10)  # the thread ends by itself: the file goes stale
        assert not thread.is_alive()
    finally:
        heartbeat.stop()


def test_beating_covers_a_wait_outside_celery_and_stops_after(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    with beating(str(path), interval=0.05):
        assert heartbeat_age(path, now=time.time()) is not None  # fresh from the start
        names = {t.name for t in threading.enumerate()}
        assert "heartbeat" in names
    assert "heartbeat" not in {t.name for t in threading.enumerate()}
    with beating("", interval=0.05):  # no file configured: nothing runs
        assert "heartbeat" not in {t.name for t in threading.enumerate()}


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        Heartbeat(tmp_path / "h", interval=0)


def _healthcheck(*args: str, env_file: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "TRAINSCALER_DISCOVER": "false"}
    if env_file:
        env["TRAINSCALER_HEARTBEAT_FILE"] = env_file
    return subprocess.run(
        [*TRAINSCALER, "healthcheck", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_healthcheck_passes_on_a_fresh_heartbeat_from_the_settings_file(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    Heartbeat(path, interval=5).beat()
    done = _healthcheck("--max-age", "60", env_file=str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("healthy: last heartbeat")


def test_healthcheck_fails_on_a_stale_heartbeat(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    Heartbeat(path, interval=5, clock=lambda: 1.0).beat()  # written at t=1 (1970)
    done = _healthcheck("--max-age", "30", "--file", str(path))
    assert done.returncode == 1
    assert "unhealthy: last heartbeat" in done.stderr and "max 30s" in done.stderr


def test_healthcheck_fails_without_a_heartbeat(tmp_path: Path) -> None:
    missing = _healthcheck("--max-age", "30", "--file", str(tmp_path / "none"))
    assert missing.returncode == 1 and "no readable heartbeat" in missing.stderr
    unset = _healthcheck("--max-age", "30")
    assert unset.returncode == 1 and "no heartbeat file configured" in unset.stderr


def test_the_probe_path_registers_only_the_healthcheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """The liveness probe does not import the other commands (the API, the simulator...)."""
    app = typer.Typer()
    register_all(app, only="healthcheck")
    assert [c.name for c in app.registered_commands] == ["healthcheck"]
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from workers.cli import main\n"
            "try:\n    main(['healthcheck', '--max-age', '1', '--file', '/nonexistent'])\n"
            "except SystemExit as e:\n    code = e.code\n"
            "print(code, 'fastapi' in sys.modules, 'trainscaler_sim' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.stdout.split() == ["1", "False", "False"], probe.stderr


def test_commands_needing_the_simulator_are_stubs_when_it_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The container image ships no simulator: ``run`` says so; every other command works."""
    for name in [m for m in sys.modules if m.split(".")[0] == "trainscaler_sim"]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("workers.commands.run", "workers.commands.run_plan", "workers.commands.simulate"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    # None in sys.modules: importing the simulator raises ModuleNotFoundError.
    monkeypatch.setitem(sys.modules, "trainscaler_sim", None)
    app = typer.Typer()
    register_all(app)
    names = {c.name for c in app.registered_commands}
    assert {"run", "simulate", "healthcheck", "api", "status"} <= names
    result = CliRunner().invoke(app, ["run"])
    assert result.exit_code == 1
    assert "needs the simulator" in result.output
