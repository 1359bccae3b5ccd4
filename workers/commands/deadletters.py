"""``trainscaler dead-letters``: list and purge what the runtime gave up on.

Reads Redis directly (``TRAINSCALER_REDIS_URL``, or the running embedded
system's); an unreachable Redis is one line naming that setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import redis
import typer

from workers.commands.connection import redis_unreachable
from workers.deadletters import DeadLetters
from workers.settings import get_settings
from workers.wiring import Runtime


@contextmanager
def _dead_letters() -> Iterator[DeadLetters]:
    settings = get_settings()
    try:
        yield Runtime(settings).dead_letters
    except redis.RedisError as error:
        typer.echo(f"error: dead-letters: {redis_unreachable(settings, error)}", err=True)
        raise typer.Exit(1) from None


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
        with _dead_letters() as letters:
            shown = letters.list(limit=limit)
            total = letters.count()
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
            typer.echo(f"{len(shown)} shown of {total} dead letter(s)")

    @group.command("purge")
    def purge(yes: bool = typer.Option(False, "--yes", help="Do not ask.")) -> None:
        """Delete every dead letter."""
        with _dead_letters() as letters:
            if not yes:
                typer.confirm(f"Delete {letters.count()} dead letter(s)?", abort=True)
            typer.echo(f"purged {letters.purge()} dead letter(s)")

    app.add_typer(group, name="dead-letters")
