"""What every route needs, built once per application: settings, runtime, producer, replies.

``ApiContext`` is stored on ``app.state.context`` by ``create_app`` and
handed to routes through the ``context`` dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import Request
from prometheus_client import CollectorRegistry

from workers.api.replies import ReplyWaiter
from workers.observability.metrics import ApiMetrics
from workers.settings import Settings
from workers.wiring import Runtime


class TaskProducer(Protocol):
    """Sends the runtime's tasks (``workers.client.CeleryClient`` in production).

    Reports and submissions are not sent: the API queues them itself
    (``workers.intake``) and only triggers ``schedule``.
    """

    def schedule(self, job: str | None = None) -> str: ...

    def finish(self, job: str, *, reply_to: str | None = None) -> str: ...


# Checks /health runs: name -> a call that raises when the part is unreachable.
Probe = Callable[[], None]


@dataclass
class ApiContext:
    settings: Settings
    runtime: Runtime
    producer: TaskProducer
    registry: CollectorRegistry
    api_metrics: ApiMetrics
    replies: ReplyWaiter
    probes: dict[str, Probe] = field(default_factory=dict)


def context(request: Request) -> ApiContext:
    """FastAPI dependency: the application's context."""
    ctx: ApiContext = request.app.state.context
    return ctx
