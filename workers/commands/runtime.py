"""``trainscaler worker|beat``: the plain Celery CLI, for convenience.

Each replaces this process with ``celery -A workers <command> [args...]``;
extra arguments pass through unchanged (e.g. ``trainscaler worker -Q events``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import typer

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def celery_argv(command: str, extra: list[str]) -> list[str]:
    """The Celery command line for ``command`` (beat runs the RedBeat scheduler from the app)."""
    return ["celery", "-A", "workers", command, *extra]


def _exec(command: str, extra: list[str]) -> None:
    # Prefer the celery next to this interpreter (the same venv).
    beside = Path(sys.executable).with_name("celery")
    binary = str(beside) if beside.exists() else shutil.which("celery")
    if binary is None:
        raise RuntimeError("the 'celery' command is not installed")
    os.execv(binary, celery_argv(command, extra))  # replaces this CLI process


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_PASS_THROUGH)
    def worker(ctx: typer.Context) -> None:
        """Run a Celery worker (``celery -A workers worker ...``)."""
        _exec("worker", list(ctx.args))

    @app.command(context_settings=_PASS_THROUGH)
    def beat(ctx: typer.Context) -> None:
        """Run Celery beat with the RedBeat scheduler (``celery -A workers beat ...``)."""
        _exec("beat", list(ctx.args))
