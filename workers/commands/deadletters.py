"""``trainscaler dead-letters``: list and purge what the runtime gave up on."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import typer

from workers.settings import get_settings
from workers.wiring import Runtime


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Payloads and operations the runtime gave up on.", no_args_is_help=True
    )

    @group.command("list")
    def list_letters(
        limit: int = typer.Option(20, min=1, help="How many, newest first."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
    ) -> None:
        """Show dead letters, newest first."""
        letters = Runtime(get_settings()).dead_letters
        shown = letters.list(limit=limit)
        for letter in shown:
            if as_json:
                typer.echo(letter.model_dump_json())
                continue
            when = datetime.fromtimestamp(letter.at, tz=UTC).isoformat(timespec="seconds")
            payload = json.dumps(letter.payload)
            if len(payload) > 120:
                payload = payload[:117] + "..."
            typer.echo(f"{when}  {letter.task}  {letter.error}\n    payload: {payload}")
        if not as_json:
            typer.echo(f"{len(shown)} shown of {letters.count()} dead letter(s)")

    @group.command("purge")
    def purge(yes: bool = typer.Option(False, "--yes", help="Do not ask.")) -> None:
        """Delete every dead letter."""
        letters = Runtime(get_settings()).dead_letters
        if not yes:
            typer.confirm(f"Delete {letters.count()} dead letter(s)?", abort=True)
        typer.echo(f"purged {letters.purge()} dead letter(s)")

    app.add_typer(group, name="dead-letters")
