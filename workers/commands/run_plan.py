"""What one ``trainscaler run`` decides before it starts children, and what it writes for clients.

``plan_run`` picks ports, passwords and the settings every child gets (secure
by default: a generated Redis password, API token and Flower credentials);
``child_layout`` turns the plan into the supervisor's layout;
``write_client_env`` and ``discovered`` tell other terminals how to reach the
run. Composed by ``workers.commands.run``.
"""

from __future__ import annotations

import os
import secrets
import shlex
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from trainscaler_sim.embedded.children import ChildLayout
from trainscaler_sim.embedded.ports import LOOPBACK, choose_port, loopback_url
from workers.adapters.redis_server import (
    generate_password,
    redis_server_binary,
    redis_url,
    write_password_config,
)
from workers.discovery import Discovered
from workers.settings import Settings


class ClusterMode(StrEnum):
    LOOPBACK = "loopback"
    KUBECONFIG = "kubeconfig"


@dataclass
class Plan:
    """Everything one run decided before starting children."""

    run_dir: Path
    settings: Settings
    embedded_redis: bool
    loopback_cluster: bool
    api_port: int
    flower_port: int
    kube_port: int = 0
    redis_port: int = 0
    # The embedded Redis's generated password (None when a Redis URL is configured).
    redis_password: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return loopback_url(self.api_port)

    @property
    def flower_url(self) -> str:
        return loopback_url(self.flower_port)


def plan_run(
    base: Settings,
    *,
    run_dir: Path,
    cluster: ClusterMode,
    api_port: int,
    flower_port: int,
    autoscale_interval: float,
) -> Plan:
    # A Redis URL set in the environment wins over the embedded server.
    embedded_redis = "redis_url" not in base.model_fields_set
    loopback = cluster == ClusterMode.LOOPBACK
    redis_port = choose_port(None) if embedded_redis else 0
    redis_password = generate_password() if embedded_redis else None
    kube_port = choose_port(None) if loopback else 0
    updates: dict[str, Any] = {
        "scaler": "kubernetes",
        "autoscale_interval": autoscale_interval,
        "api_auth_disabled": False,
        "api_token": base.api_token or secrets.token_urlsafe(24),
        "flower_basic_auth": base.flower_basic_auth or f"admin:{secrets.token_urlsafe(18)}",
        # Children take exactly the settings given here, never another run's discovery file.
        "discover": False,
    }
    if "cluster_policy_params" not in base.model_fields_set:
        # Time runs compressed here and a loopback pod restarts within a second:
        # goodput's restart cost (30 s on a real cluster) would make every epoch
        # of a short run look "mixed" and keep every job at its requested size.
        updates["cluster_policy_params"] = {"goodput": {"restart_s": 1.0}}
    if embedded_redis:
        updates["redis_url"] = redis_url(host=LOOPBACK, port=redis_port, password=redis_password)
    if loopback:
        updates["kubeconfig"] = str(run_dir / "kubeconfig")
        updates["kube_in_cluster"] = False
    api = choose_port(api_port)
    updates["api_url"] = loopback_url(api)
    settings = base.model_copy(update=updates)
    flower = choose_port(flower_port)
    notes = [
        f"{name} port {wanted} is taken; using {chosen}"
        for name, wanted, chosen in (("API", api_port, api), ("Flower", flower_port, flower))
        if wanted and wanted != chosen
    ]
    return Plan(
        run_dir=run_dir,
        settings=settings,
        embedded_redis=embedded_redis,
        loopback_cluster=loopback,
        api_port=api,
        flower_port=flower,
        kube_port=kube_port,
        redis_port=redis_port,
        redis_password=redis_password,
        notes=notes,
    )


def child_layout(plan: Plan, *, nodes: int, gpus: int) -> ChildLayout:
    config = None
    if plan.embedded_redis and plan.redis_password is not None:
        config = write_password_config(plan.run_dir / "redis" / "redis.conf", plan.redis_password)
    return ChildLayout(
        run_dir=plan.run_dir,
        api_port=plan.api_port,
        flower_port=plan.flower_port,
        redis_server=redis_server_binary() if plan.embedded_redis else None,
        redis_port=plan.redis_port,
        redis_config=config,
        kube_port=plan.kube_port if plan.loopback_cluster else 0,
        nodes=nodes,
        gpus=gpus,
        gpu_resource=plan.settings.gpu_resource,
    )


def write_client_env(plan: Plan) -> Path:
    """``source`` it in another terminal to use ``trainscaler jobs|status|...`` on this run.

    It holds the run's secrets (API token, Redis password, Flower credentials):
    created 0600, readable by its owner alone.
    """
    values = {
        "TRAINSCALER_API_URL": plan.api_url,
        "TRAINSCALER_API_TOKEN": plan.settings.api_token or "",
        "TRAINSCALER_REDIS_URL": plan.settings.redis_url,
        "TRAINSCALER_FLOWER_BASIC_AUTH": plan.settings.flower_basic_auth or "",
    }
    if plan.settings.kubeconfig:
        values["TRAINSCALER_KUBECONFIG"] = plan.settings.kubeconfig
    path = plan.run_dir / "env"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as env_file:
        env_file.write("".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items()))
    return path


def discovered(plan: Plan) -> Discovered:
    """What clients need to reach this run (``workers.discovery``)."""
    settings = plan.settings
    values = {
        "api_url": plan.api_url,
        "api_token": settings.api_token or "",
        "redis_url": settings.redis_url,
        "kubeconfig": settings.kubeconfig or "",
    }
    return Discovered(
        pid=os.getpid(),
        run_dir=str(plan.run_dir),
        started_at=time.time(),
        settings={k: v for k, v in values.items() if v},
        flower_url=plan.flower_url,
        flower_basic_auth=settings.flower_basic_auth,
    )
