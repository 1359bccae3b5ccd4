"""``trainscaler planner``: the one process per deployment that owns the cluster view.

It blocks as a standby until it holds the planner Lease
(``coordination.k8s.io/v1``, ``workers.adapters.kubernetes.lease``), then
runs a Celery worker in this process with ``--pool solo -Q control``: the
only consumer of ``control`` (autoscale, lease sweep, finish, ...), hence
the only process that builds informers and runs the cluster policy. A
thread renews the Lease; once it is lost the process exits at once with
``LOST_LEASE_EXIT`` (controller-runtime's way: a planner that may no longer
lead must not finish its round), and its supervisor restarts it as a
standby. A normal shutdown releases the Lease so a standby takes over
without waiting for it to expire. Extra arguments go to the Celery worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import typer

from workers.settings import Settings, get_settings

log = logging.getLogger(__name__)

# EX_TEMPFAIL: "try again later" — the supervisor restarts the process as a standby.
LOST_LEASE_EXIT = 75
CONTROL_QUEUE = "control"
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: Settings, *, pod_namespace: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """Where the Lease lives: the setting, else the pod's namespace, else ``default``."""
    if settings.planner_lease_namespace:
        return settings.planner_lease_namespace
    if settings.kube_in_cluster and pod_namespace.exists():
        return pod_namespace.read_text().strip() or "default"
    return "default"


def planner_identity(settings: Settings) -> str:
    return settings.planner_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


# The planner's role is its queue and its pool: neither may be overridden.
_FIXED_OPTIONS = ("-Q", "--queues", "-P", "--pool", "-X", "--exclude-queues")


def worker_argv(identity: str, extra: list[str]) -> list[str]:
    """The in-process Celery worker's command line (queue and pool are not negotiable)."""
    fixed = [a for a in extra if a.split("=", 1)[0] in _FIXED_OPTIONS]
    if fixed:
        raise ValueError(f"the planner always runs --pool solo --queues control; drop {fixed}")
    return [
        "worker",
        "--pool",
        "solo",
        "--queues",
        CONTROL_QUEUE,
        "--hostname",
        f"planner-{identity}@%h",
        *extra,
    ]


def run_planner(
    settings: Settings,
    extra: list[str],
    *,
    exit_now: Callable[[int], None] = os._exit,
) -> int:
    """Standby until leader, then the planner's worker; returns the exit code."""
    # Imported here: the CLI's other commands must not load Celery or Kubernetes.
    from workers.adapters.kubernetes.client import MonotonicClock, WallClock
    from workers.adapters.kubernetes.lease import ElectionTiming, LeaderElector
    from workers.celery_app import app, worker_exposition
    from workers.observability.logs import configure_logging
    from workers.tasks import runtime

    configure_logging(settings)
    # The standby serves /metrics too (its Lease requests count); the worker keeps it.
    worker_exposition.serve()
    identity = planner_identity(settings)
    namespace = lease_namespace(settings)
    elector = LeaderElector(
        # The process's one rate-limited client (the planner's informers share it).
        client=runtime().kube.client,
        namespace=namespace,
        name=settings.planner_lease_name,
        identity=identity,
        clock=MonotonicClock(),
        wall_clock=WallClock(),
        timing=ElectionTiming(
            lease_duration_s=settings.planner_lease_duration_seconds,
            renew_deadline_s=settings.planner_renew_deadline_seconds,
            retry_period_s=settings.planner_retry_period_seconds,
        ),
    )
    log.info(
        "planner %s: standby for lease %s/%s",
        identity,
        namespace,
        settings.planner_lease_name,
    )
    if not elector.acquire(threading.Event()):
        return 1
    log.info("planner %s: leading", identity)
    # The Lease now makes this the only planner (the last leader stopped at its renew
    # deadline, before the lease ran out): a round lock it left behind, dying
    # mid-round, would hold every round back for the lock's TTL.
    store = runtime().store
    store.redis.delete(store.key("lock:autoscale"))
    stop_renewing = threading.Event()

    def renew() -> None:
        if not elector.renew_until_lost(stop_renewing):
            log.critical("planner %s: lease lost; exiting to restart as standby", identity)
            logging.shutdown()
            exit_now(LOST_LEASE_EXIT)

    renewer = threading.Thread(target=renew, name="lease-renewer", daemon=True)
    renewer.start()
    try:
        app.worker_main(argv=worker_argv(identity, extra))
    finally:
        stop_renewing.set()
        renewer.join(timeout=settings.planner_retry_period_seconds + 5)
        elector.release()
        log.info("planner %s: lease released", identity)
    return 0


def register(app: typer.Typer) -> None:
    @app.command(context_settings=_PASS_THROUGH)
    def planner(ctx: typer.Context) -> None:
        """Run the planner: standby until it holds the Lease, then the control-queue worker."""
        raise typer.Exit(run_planner(get_settings(), list(ctx.args)))
