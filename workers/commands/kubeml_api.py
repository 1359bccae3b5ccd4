"""``trainscaler kubeml-api``: serve KubeML's scheduler API for KubeML's own components.

No token (KubeML sends none): it starts only with
``TRAINSCALER_KUBEML_API_ENABLED=true`` and ``TRAINSCALER_PS_URL`` set, and is
deployed behind deploy/kubeml-api.yaml's NetworkPolicy. Port 10200 is KubeML's
scheduler port. docs/api.md, "Migrating from KubeML".
"""

from __future__ import annotations

from typing import Annotated

import typer

from workers.api.kubeml_compat import create_kubeml_app
from workers.commands.api import serve
from workers.observability.logs import configure_logging
from workers.settings import get_settings

KUBEML_SCHEDULER_PORT = 10200


def kubeml_api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (KubeML's scheduler port).")
    ] = KUBEML_SCHEDULER_PORT,
) -> None:
    """Serve KubeML's scheduler routes (/train, /job, /infer, /finish, /health), no token."""
    settings = get_settings()
    configure_logging(settings)
    serve(create_kubeml_app(settings), host=host, port=port)


def register(app: typer.Typer) -> None:
    app.command(name="kubeml-api")(kubeml_api)
