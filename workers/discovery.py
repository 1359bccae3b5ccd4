"""Where a running embedded system (``trainscaler run``) leaves its connection details.

One JSON file per user (``discovery_path``): ``$XDG_RUNTIME_DIR/trainscaler/
embedded.json`` when that variable is set, else ``~/.local/state/trainscaler/
embedded.json``; ``TRAINSCALER_DISCOVERY_FILE`` names another file. ``run``
writes it (mode 0600: it holds the API token and the Redis URL) once the system
is up, and removes it on exit if it is still its own. ``Settings`` reads it as
its lowest-priority source (``workers.settings``), so every client command and
``celery -A workers ...`` reach the running system with nothing exported; an
explicit ``TRAINSCALER_*`` variable or option always wins. A file whose writer
is gone (its pid no longer runs) is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

# The settings a running embedded system supplies to its clients.
DISCOVERED_SETTINGS = ("api_url", "api_token", "redis_url", "kubeconfig")
FILE_NAME = "embedded.json"


class Discovered(BaseModel):
    """The file's content: who wrote it, and how to reach what it started."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    run_dir: str
    started_at: float
    settings: dict[str, str]
    flower_url: str | None = None
    # user:password when Flower is behind basic auth.
    flower_basic_auth: str | None = None


def discovery_path(environ: Mapping[str, str], *, home: Path) -> Path:
    """The per-user file: ``TRAINSCALER_DISCOVERY_FILE``, else the XDG places."""
    explicit = environ.get("TRAINSCALER_DISCOVERY_FILE")
    if explicit:
        return Path(explicit).expanduser()
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return Path(runtime_dir) / "trainscaler" / FILE_NAME
    return home / ".local" / "state" / "trainscaler" / FILE_NAME


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def read_discovered(path: Path) -> Discovered | None:
    """The running system the file describes; None when absent, unreadable or stale."""
    try:
        found = Discovered.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return None
    return found if _pid_running(found.pid) else None


def discovered_settings(path: Path) -> dict[str, Any]:
    """The settings the file supplies (only the connection ones), or nothing."""
    found = read_discovered(path)
    if found is None:
        return {}
    return {k: v for k, v in found.settings.items() if k in DISCOVERED_SETTINGS and v}


def write_discovered(path: Path, discovered: Discovered) -> None:
    """Write atomically with mode 0600 (it holds credentials); the folder is 0700."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".embedded-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w") as handle:  # mkstemp creates it 0600
            handle.write(discovered.model_dump_json(indent=2))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_discovered(path: Path, *, pid: int) -> bool:
    """Remove the file if process ``pid`` wrote it (another run may have replaced it)."""
    try:
        found = Discovered.model_validate_json(path.read_text())
    except (OSError, ValueError, ValidationError):
        return False
    if found.pid != pid:
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def discovery_note(path: Path) -> str:
    """For error messages: whether a running embedded system was found, and where."""
    found = read_discovered(path)
    if found is None:
        return (
            f"no running embedded system found ({path} is absent or stale; "
            "start one with `trainscaler run`)"
        )
    return f"a running embedded system was found (pid {found.pid}, {path})"


def export_lines(found: Discovered) -> list[str]:
    """``export TRAINSCALER_...=...`` lines for a shell (``eval "$(trainscaler env)"``)."""
    lines = [
        f"export TRAINSCALER_{name.upper()}={shlex.quote(value)}"
        for name, value in found.settings.items()
        if name in DISCOVERED_SETTINGS and value
    ]
    if found.flower_url:
        lines.append(f"# Flower: {found.flower_url}")
    if found.flower_basic_auth:
        lines.append(f"export FLOWER_BASIC_AUTH={shlex.quote(found.flower_basic_auth)}")
    return lines


def discovered_json(found: Discovered) -> str:
    return json.dumps(found.model_dump(mode="json"), indent=2)
