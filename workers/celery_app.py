"""The Celery application ``trainscaler``: broker, queues, routes and safety settings.

* JSON only, in and out (no pickle anywhere).
* At-least-once: acks late, reject on worker lost, prefetch 1, and a broker
  visibility timeout longer than the longest task run, so a killed worker's
  message is redelivered. ``schedule`` and ``scale`` are the exceptions
  (``UNRECORDED_TASKS``): what they carry is kept in Redis and swept.
* Three queues with routes, so a slow Kubernetes API never delays epoch
  reports: ``control`` (autoscale, lease sweep, finish), ``events``
  (submit, report_epoch, schedule) and ``cluster-writes`` (scale).

Start with the plain Celery CLI: ``celery -A workers worker``, ``celery -A
workers beat`` (RedBeat scheduler, set here), ``celery -A workers flower``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery, signals
from kombu import Exchange, Queue  # type: ignore[attr-defined]

from workers.adapters.redis_sentinel import celery_redis
from workers.beat_schedule import beat_schedule, redbeat_lock_timeout
from workers.heartbeat import heartbeat_step
from workers.observability.logs import configure_logging
from workers.observability.worker_exposition import install_worker_exposition
from workers.settings import Settings, get_settings
from workers.wiring import redis_ssl_options

CONTROL = "control"
EVENTS = "events"
CLUSTER_WRITES = "cluster-writes"

TASK_ROUTES = {
    "trainscaler.autoscale": {"queue": CONTROL},
    "trainscaler.sweep_leases": {"queue": CONTROL},
    "trainscaler.finish": {"queue": CONTROL},
    "trainscaler.noop": {"queue": CONTROL},
    "trainscaler.submit": {"queue": EVENTS},
    "trainscaler.report_epoch": {"queue": EVENTS},
    "trainscaler.schedule": {"queue": EVENTS},
    "trainscaler.scale": {"queue": CLUSTER_WRITES},
}

#: Tasks whose messages kombu does not record for redelivery, because what they
#: carry is kept in Redis already and ``sweep_leases`` sends them again:
#: ``schedule`` only triggers a run over the SchedulerQueue, whose items are
#: leased; ``scale`` applies decisions kept with their generations, and a
#: decision no scale applied is resent (``workers.adapters.pending_scales``).
UNRECORDED_TASKS = ("trainscaler.schedule", "trainscaler.scale")


def create_app(settings: Settings) -> Celery:
    # The plain Redis URL, or the sentinels (workers.adapters.redis_sentinel).
    connections = celery_redis(settings)
    app = Celery(
        "trainscaler",
        broker=connections.broker_url,
        backend=connections.backend_url,
        include=["workers.tasks"],
    )
    transport = {
        **connections.transport_options,
        "visibility_timeout": settings.broker_visibility_timeout,
        "unacked_restore_interval": settings.broker_restore_interval,
        # Scan on every sweep, so the restore interval alone sets the cadence.
        "unacked_restore_throttle": 1,
        # What they carry is kept in Redis already (workers/guarded_transport.py,
        # SelectiveQoS).
        "unrecorded_tasks": frozenset(UNRECORDED_TASKS),
    }
    ssl_options = redis_ssl_options(settings)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Every message is checked before Celery parses it: a hostile one is
        # dead-lettered and acked, never a worker crash (workers/message_guard.py).
        worker_consumer="workers.message_guard:GuardedConsumer",
        # ... and every list item before kombu parses it (workers/guarded_transport.py).
        broker_transport=connections.transport,
        broker_transport_options=transport,
        result_backend_transport_options={
            **connections.transport_options,
            "visibility_timeout": settings.broker_visibility_timeout,
        },
        broker_connection_retry_on_startup=True,
        # Sending a follow-up or a retry rides out a Redis restart (about 30 s),
        # rather than failing the task that sends it.
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 30,
            "interval_start": 0.1,
            "interval_step": 0.5,
            "interval_max": 1.0,
        },
        broker_use_ssl=ssl_options,
        redis_backend_use_ssl=ssl_options,
        result_expires=int(settings.result_expires),
        # Storing a result rides out a Redis restart too (the task's work is done).
        result_backend_always_retry=True,
        result_backend_max_retries=30,
        result_backend_base_sleep_between_retries_ms=100,
        result_backend_max_sleep_between_retries_ms=1000,
        result_extended=False,
        # Each queue on its own exchange and key: a bare Queue(name) gets the default
        # exchange and key ("control"), so all three would be bound alike and every
        # message would land on every queue.
        task_queues=tuple(
            Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]
            for name in (CONTROL, EVENTS, CLUSTER_WRITES)
        ),
        task_default_queue=CONTROL,
        task_routes=TASK_ROUTES,
        task_track_started=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        enable_utc=True,
        timezone="UTC",
        beat_schedule=beat_schedule(settings),
        beat_scheduler="workers.adapters.beat_scheduler:FailoverTolerantScheduler",
        redbeat_redis_url=connections.redbeat_url,
        redbeat_key_prefix=f"{settings.redis_key_prefix}redbeat:",
        redbeat_lock_timeout=redbeat_lock_timeout(settings),
        # Explicit (empty unless Sentinel): RedBeat must not inherit the broker's options.
        redbeat_redis_options=connections.redbeat_options,
        beat_max_loop_interval=max(1, int(min(settings.autoscale_interval, 5))),
    )
    if settings.heartbeat_file:
        # Liveness without the broker: see workers/heartbeat.py.
        app.steps["worker"].add(
            heartbeat_step(Path(settings.heartbeat_file), interval=settings.heartbeat_interval)
        )
    return app


def _configure_logging(**_: Any) -> None:
    # A receiver of setup_logging replaces Celery's own logging setup (worker and
    # beat alike): every process logs in the one shape Settings.log_format picks.
    configure_logging(get_settings())


# Connected without the (untyped) decorator form; weak=False: a module function lives on.
signals.setup_logging.connect(_configure_logging, weak=False)

# A worker's per-pod /metrics (Settings.worker_metrics_port); other processes never start it.
worker_exposition = install_worker_exposition(get_settings())

app = create_app(get_settings())
