"""``trainscaler api``: serve the HTTP API (FastAPI on uvicorn).

Settings come from the environment once (``TRAINSCALER_*``); logs go through
``workers.observability.logs`` (JSON lines with ``TRAINSCALER_LOG_FORMAT=json``).
The request log is the API's own middleware, so uvicorn's access log is off.
"""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn
from starlette.types import ASGIApp

from workers.api.app import create_app
from workers.observability.logs import configure_logging
from workers.settings import get_settings


def api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Serve the HTTP API (KubeML's routes, jobs, plan, queue, health, metrics)."""
    settings = get_settings()
    configure_logging(settings)
    serve(create_app(settings), host=host, port=port)


def serve(app: ASGIApp, *, host: str, port: int) -> None:
    """uvicorn as every trainscaler listener runs it: the request log is the app's own."""
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        proxy_headers=True,
        server_header=False,
        timeout_graceful_shutdown=10,
    )


def register(app: typer.Typer) -> None:
    app.command(name="api")(api)
