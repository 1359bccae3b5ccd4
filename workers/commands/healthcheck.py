"""``trainscaler healthcheck``: the liveness probe of a worker pod, from its heartbeat file.

Exit 0 when the worker's main process wrote its heartbeat (``workers.heartbeat``)
within ``--max-age`` seconds, else exit 1 with one line saying why. It reads
one local file and never touches Redis, so a Redis outage fails readiness
(``celery inspect ping``), never liveness. The CLI registers only this command
when it is the one asked for, so the probe stays cheap (``workers.cli``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from workers.heartbeat import heartbeat_age
from workers.settings import get_settings


def healthcheck(
    max_age: Annotated[
        float, typer.Option(min=0.001, help="Fail when the last heartbeat is older (seconds).")
    ],
    file: Annotated[
        Path | None,
        typer.Option(help="The heartbeat file (default: TRAINSCALER_HEARTBEAT_FILE)."),
    ] = None,
) -> None:
    """Check the worker's heartbeat file: exit 0 if fresh, 1 if stale or missing."""
    path = file if file is not None else Path(get_settings().heartbeat_file)
    if not str(path) or str(path) == ".":
        typer.echo("unhealthy: no heartbeat file configured (TRAINSCALER_HEARTBEAT_FILE)", err=True)
        raise typer.Exit(1)
    age = heartbeat_age(path, now=time.time())
    if age is None:
        typer.echo(f"unhealthy: no readable heartbeat in {path}", err=True)
        raise typer.Exit(1)
    if age > max_age:
        typer.echo(f"unhealthy: last heartbeat {age:.1f}s ago (max {max_age:g}s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"healthy: last heartbeat {age:.1f}s ago")


def register(app: typer.Typer) -> None:
    app.command(name="healthcheck")(healthcheck)
