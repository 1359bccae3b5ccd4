"""``trainscaler env``: the running embedded system's connection details as shell exports.

``eval "$(trainscaler env)"`` sets ``TRAINSCALER_API_URL``, ``_API_TOKEN``,
``_REDIS_URL`` and ``_KUBECONFIG`` for tools that do not read the discovery
file themselves (the ``trainscaler`` commands and ``celery -A workers`` do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workers.discovery import discovered_json, discovery_note, export_lines, read_discovered
from workers.settings import get_settings


def env(
    as_json: Annotated[bool, typer.Option("--json", help="The discovery file as JSON.")] = False,
) -> None:
    """Print the running embedded system's connection details as shell exports."""
    path = Path(get_settings().discovery_file)
    found = read_discovered(path)
    if found is None:
        typer.echo(f"error: {discovery_note(path)}", err=True)
        raise typer.Exit(1)
    typer.echo(discovered_json(found) if as_json else "\n".join(export_lines(found)))


def register(app: typer.Typer) -> None:
    app.command(name="env")(env)
