"""``trainscaler flower``: Flower against the runtime's broker (``celery -A workers flower``).

The broker URL comes from ``Settings`` (``TRAINSCALER_REDIS_URL``), passed
explicitly so Flower and the workers always watch the same broker. The
process is replaced by Flower (``exec``), so signals reach Flower directly.
It is protected with basic auth: ``--basic-auth user:password``, else
``TRAINSCALER_FLOWER_BASIC_AUTH`` (or Flower's own ``FLOWER_BASIC_AUTH``);
the embedded ``trainscaler run`` generates credentials and serves it on
loopback only.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from workers.adapters.redis_sentinel import celery_redis
from workers.settings import Settings, get_settings


def flower_argv(
    settings: Settings,
    *,
    address: str,
    port: int,
    basic_auth: str | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    argv = [
        sys.executable, "-m", "celery", "-A", "workers", f"--broker={celery_redis(settings).broker_url}",
        "flower", f"--address={address}", f"--port={port}",
    ]  # fmt: skip
    if basic_auth:
        argv.append(f"--basic-auth={basic_auth}")
    return argv + list(extra or [])


def flower(
    ctx: typer.Context,
    address: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    *,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 5555,
    basic_auth: Annotated[
        str | None, typer.Option(help="user:password[,user2:password2] for basic auth.")
    ] = None,
) -> None:
    """Start Flower on the runtime's broker; extra arguments go to Flower."""
    settings = get_settings()
    argv = flower_argv(
        settings,
        address=address,
        port=port,
        basic_auth=basic_auth or settings.flower_basic_auth,
        extra=list(ctx.args),
    )
    os.execv(sys.executable, argv)


def register(app: typer.Typer) -> None:
    app.command(
        name="flower",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(flower)
