"""What every route needs, built once per application: settings, runtime, producer.

``ApiContext`` is stored on ``app.state.context`` by ``create_app`` and
handed to routes through the ``context`` dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import Request
from prometheus_client import CollectorRegistry

from scheduler_core.models import EpochReport, TrainRequest
from workers.observability.metrics import ApiMetrics
from workers.settings import Settings
from workers.wiring import Runtime


class TaskProducer(Protocol):
    """Enqueues the runtime's tasks (``workers.client.CeleryClient`` in production)."""

    def submit(self, request: TrainRequest, *, task_id: str | None = None) -> tuple[str, str]: ...

    def report(self, report: EpochReport) -> str: ...

    def finish(self, job: str) -> str: ...


# Checks /health runs: name -> a call that raises when the part is unreachable.
Probe = Callable[[], None]


@dataclass
class ApiContext:
    settings: Settings
    runtime: Runtime
    producer: TaskProducer
    registry: CollectorRegistry
    api_metrics: ApiMetrics
    probes: dict[str, Probe] = field(default_factory=dict)
    # Seconds between reads while a route waits for the runtime to act.
    poll_interval: float = 0.05


def context(request: Request) -> ApiContext:
    """FastAPI dependency: the application's context."""
    ctx: ApiContext = request.app.state.context
    return ctx
