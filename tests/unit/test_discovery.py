"""The discovery file: where a running embedded system's connection details live,
and how ``Settings`` reads them (lowest priority, only while the writer runs)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from workers.commands.run import _clean_up
from workers.discovery import (
    Discovered,
    discovery_note,
    discovery_path,
    export_lines,
    read_discovered,
    remove_discovered,
    write_discovered,
)
from workers.settings import Settings


def _discovered(pid: int, **settings: str) -> Discovered:
    return Discovered(pid=pid, run_dir="/tmp/r", started_at=1.0, settings=settings)


def test_the_file_is_per_user_under_xdg_runtime_dir_or_local_state(tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = home / ".local" / "state" / "trainscaler" / "embedded.json"
    assert discovery_path({}, home=home) == state
    assert discovery_path({"XDG_RUNTIME_DIR": ""}, home=home) == state
    assert discovery_path({"XDG_RUNTIME_DIR": "/run/user/7"}, home=home) == Path(
        "/run/user/7/trainscaler/embedded.json"
    )
    assert discovery_path({"TRAINSCALER_DISCOVERY_FILE": "/x/y.json"}, home=home) == Path(
        "/x/y.json"
    )


def test_written_private_read_back_and_removed_only_by_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "state" / "embedded.json"
    write_discovered(path, _discovered(os.getpid(), api_url="http://a", api_token="t 1"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    found = read_discovered(path)
    assert found is not None and found.settings["api_url"] == "http://a"
    assert "export TRAINSCALER_API_TOKEN='t 1'" in export_lines(found)
    assert "a running embedded system was found" in discovery_note(path)
    assert not remove_discovered(path, pid=os.getpid() + 1) and path.exists()
    assert remove_discovered(path, pid=os.getpid()) and not path.exists()
    assert "no running embedded system found" in discovery_note(path)


def test_a_file_left_by_a_dead_run_is_ignored(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    path = tmp_path / "embedded.json"
    write_discovered(path, _discovered(int(finished.stdout), api_url="http://gone"))
    assert read_discovered(path) is None


def test_settings_read_it_at_lowest_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "embedded.json"
    write_discovered(
        path,
        _discovered(os.getpid(), api_url="http://found:1", redis_url="redis://found:2/0",
                    max_load_desired="0.5"),
    )  # fmt: skip
    monkeypatch.setenv("TRAINSCALER_DISCOVER", "true")
    monkeypatch.setenv("TRAINSCALER_DISCOVERY_FILE", str(path))
    monkeypatch.setenv("TRAINSCALER_REDIS_URL", "redis://explicit:3/0")
    settings = Settings()
    assert settings.api_url == "http://found:1"  # nothing else set it
    assert settings.redis_url == "redis://explicit:3/0"  # the environment wins
    assert settings.max_load_desired == 0.97  # only connection settings are taken
    assert Settings(api_url="http://kw").api_url == "http://kw"
    assert Settings(discover=False).api_url == "http://127.0.0.1:8000"
    monkeypatch.setenv("TRAINSCALER_DISCOVER", "false")
    assert Settings().api_url == "http://127.0.0.1:8000"


def test_a_run_folder_it_created_is_removed_on_a_clean_exit(tmp_path: Path) -> None:
    said: list[str] = []
    created = tmp_path / "created"
    (created / "logs").mkdir(parents=True)
    (created / "kubeconfig").write_text("token")
    _clean_up(created, created=True, exit_code=0, say=said.append, loopback_kubeconfig=None)
    assert not created.exists()
    failed = tmp_path / "failed"
    (failed / "logs").mkdir(parents=True)
    (failed / "kubeconfig").write_text("token")
    _clean_up(
        failed,
        created=True,
        exit_code=1,
        say=said.append,
        loopback_kubeconfig=failed / "kubeconfig",
    )
    assert (failed / "logs").exists() and not (failed / "kubeconfig").exists()
    assert said == [f"logs kept in {failed / 'logs'}"]
