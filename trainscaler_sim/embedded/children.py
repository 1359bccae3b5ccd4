"""The child processes of ``trainscaler run``: their command lines and readiness checks.

Started in two waves through the ``Supervisor``: first Redis and the loopback
Kubernetes API server (each only when the run embeds it), side by side; then
the Celery worker, beat, the HTTP API and Flower, side by side. Only command
lines live here (``celery -A workers ...``, ``python -m trainscaler_sim.apiserver``,
``trainscaler api``): nothing of the runtime is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainscaler_sim.embedded.ports import LOOPBACK, loopback_url
from trainscaler_sim.embedded.supervisor import (
    Child,
    ChildSpec,
    Supervisor,
    http_ready,
    log_ready,
    tcp_ready,
)

CELERY_QUEUES = "control,events,cluster-writes"


@dataclass(frozen=True)
class ChildLayout:
    """Where every child listens and keeps its files."""

    run_dir: Path
    api_port: int
    flower_port: int
    # None: Redis is not embedded (a configured URL is used).
    redis_server: str | None = None
    redis_port: int = 0
    # The embedded Redis's config file (its generated ``requirepass``), 0600.
    redis_config: Path | None = None
    # 0: no loopback API server (``--cluster kubeconfig``).
    kube_port: int = 0
    nodes: int = 4
    gpus: int = 4
    gpu_resource: str = "nvidia.com/gpu"

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    @property
    def api_url(self) -> str:
        return loopback_url(self.api_port)

    @property
    def flower_url(self) -> str:
        return loopback_url(self.flower_port)


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def infrastructure(layout: ChildLayout, env: Mapping[str, str]) -> list[ChildSpec]:
    """Redis and the loopback API server, when embedded."""
    specs = []
    if layout.redis_server is not None:
        data = layout.run_dir / "redis"
        data.mkdir(parents=True, exist_ok=True)
        config = [str(layout.redis_config)] if layout.redis_config is not None else []
        argv = [
            layout.redis_server, *config,
            "--bind", LOOPBACK, "--port", str(layout.redis_port), "--dir", str(data),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
        ]  # fmt: skip
        specs.append(
            ChildSpec("redis", argv, env, ready=tcp_ready(layout.redis_port), ready_timeout=20)
        )
    if layout.kube_port:
        argv = _python(
            "-m", "trainscaler_sim.apiserver", "--port", str(layout.kube_port), "--nodes", str(layout.nodes),
            "--gpus", str(layout.gpus), "--gpu-resource", layout.gpu_resource,
            "--kubeconfig", str(layout.kubeconfig),
        )  # fmt: skip
        # The server writes its kubeconfig once it listens and its nodes exist.
        specs.append(ChildSpec("apiserver", argv, env, ready=layout.kubeconfig.exists))
    return specs


def runtime(layout: ChildLayout, env: Mapping[str, str], *, log_dir: Path) -> list[ChildSpec]:
    """The Celery worker (with task events, for Flower), beat, the API and Flower."""
    celery = _python("-m", "celery", "-A", "workers")
    auth = env.get("TRAINSCALER_FLOWER_BASIC_AUTH")
    flower_env = {"FLOWER_BASIC_AUTH": auth} if auth else {}
    return [
        ChildSpec(
            "worker",
            [
                *celery, "worker", "--pool", "threads", "--concurrency", "4", "--events",
                "--queues", CELERY_QUEUES, "--hostname", "trainscaler@%h", "--loglevel", "INFO",
            ],
            env,
            ready=log_ready(log_dir / "worker.log", " ready."),
        ),
        ChildSpec(
            "beat",
            [
                *celery, "beat", "--loglevel", "INFO", "--max-interval", "1",
                "--schedule", str(layout.run_dir / "beat-schedule"),
            ],
            env,
        ),
        ChildSpec(
            "api",
            _python("-m", "workers.cli", "api", "--host", LOOPBACK, "--port", str(layout.api_port)),
            env,
            # Up is enough here: /health is 503 until Redis and the cluster answer.
            ready=http_ready(f"{layout.api_url}/health", statuses=(200, 503)),
        ),
        ChildSpec(
            "flower",
            [*celery, "flower", f"--address={LOOPBACK}", f"--port={layout.flower_port}"],
            # Basic auth with the run's generated credentials (Flower reads
            # FLOWER_BASIC_AUTH; an environment is private to its process).
            {**env, **flower_env},
            ready=http_ready(f"{layout.flower_url}/healthcheck", statuses=(200, 401)),
        ),
    ]  # fmt: skip


def start_all(supervisor: Supervisor, layout: ChildLayout, *, env: Mapping[str, str]) -> None:
    """Both waves, each started side by side and then waited for."""
    for wave in (infrastructure(layout, env), runtime(layout, env, log_dir=supervisor.log_dir)):
        started: list[Child] = [supervisor.start(spec, wait=False) for spec in wave]
        for child in started:
            supervisor.wait_ready(child)
