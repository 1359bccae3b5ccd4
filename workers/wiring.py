"""The composition root: builds every adapter from ``Settings``.

Tasks, the CLI and the API ask here for what they need; nothing else decides
which implementation of a port is used. The Kubernetes adapters (owned by
``workers.adapters.kubernetes``) are imported lazily, only when
``Settings.scaler == "kubernetes"``, so the rest runs without them.

One Kubernetes client per process (one ``KubeAdapter``: one token bucket),
shared by its reader and its scaler. Only the planner's autoscale round asks
for ``Runtime.cluster_view`` (the list-and-watch cache); every other reader
(``Runtime.cluster_reader``) reads with targeted requests and holds nothing,
so watch streams and cache memory do not grow with worker processes.
"""

from __future__ import annotations

import importlib
import ssl
import time
from collections.abc import Callable
from functools import cached_property
from typing import Any

import redis
import redis.asyncio
from prometheus_client import CollectorRegistry
from redis import Redis

from scheduler_core.ports import Clock, ClusterReader, JobLookup, ReplicaScaler
from workers.adapters.job_retention import JobRetention
from workers.adapters.parameter_server import with_parameter_servers
from workers.adapters.recording_scaler import FaultInjector, RecordingScaler
from workers.adapters.redis_queue import RedisSchedulerQueue
from workers.adapters.redis_sentinel import async_sentinel_client, sentinel_client
from workers.adapters.report_intake import ReportIntake
from workers.adapters.state_store import StateStore
from workers.adapters.static_cluster import StaticClusterReader
from workers.deadletters import DeadLetters
from workers.observability.metrics import RuntimeMetrics
from workers.settings import Settings

_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


class SystemClock:
    """The wall clock, injected wherever time is needed."""

    def now(self) -> float:
        return time.time()


class RedisClock:
    """Time as stored in Redis (``P clock:now``): every process of a replay shares it."""

    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self._redis = client
        self.key = f"{prefix}clock:now"

    def now(self) -> float:
        raw = self._redis.get(self.key)
        if raw is None:
            raise RuntimeError(f"TRAINSCALER_CLOCK=redis but {self.key} is not set")
        return float(raw)

    def set(self, seconds: float) -> None:
        self._redis.set(self.key, repr(float(seconds)))


def redis_ssl_options(settings: Settings) -> dict[str, Any] | None:
    """TLS options for ``rediss://`` URLs (None for plain ``redis://``)."""
    if not settings.redis_url.startswith("rediss://"):
        return None
    options: dict[str, Any] = {"ssl_cert_reqs": _CERT_REQS[settings.redis_ssl_cert_reqs]}
    if settings.redis_ssl_ca_certs:
        options["ssl_ca_certs"] = settings.redis_ssl_ca_certs
    return options


def build_redis(settings: Settings) -> redis.Redis:
    options: dict[str, Any] = {
        "socket_timeout": 10.0,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 15,
        "retry_on_timeout": True,
    }
    if settings.redis_sentinels:  # the primary the sentinels name, found again after a failover
        return sentinel_client(settings, **options)
    return redis.Redis.from_url(
        settings.redis_url, **options, **(redis_ssl_options(settings) or {})
    )


def build_async_redis(settings: Settings) -> redis.asyncio.Redis:
    """An asyncio client for the API's waits on reply keys (``BLPOP``, bounded by the
    route's own timeout, so no socket timeout cuts a wait short)."""
    if settings.redis_sentinels:  # the primary the sentinels name, as ``build_redis``
        return async_sentinel_client(settings, socket_timeout=None, socket_connect_timeout=5.0)
    options = redis_ssl_options(settings) or {}
    return redis.asyncio.Redis.from_url(
        settings.redis_url, socket_timeout=None, socket_connect_timeout=5.0, **options
    )


def _kube_observer(metrics: RuntimeMetrics | None) -> Callable[[str, int | str], None] | None:
    """Counts every Kubernetes API request by verb and answer, in memory (``/metrics``)."""
    if metrics is None:
        return None

    def observe(verb: str, code: int | str) -> None:
        metrics.record_kube_request(verb=verb, code=code)

    return observe


class Runtime:
    """Every adapter one worker process uses, built on first use."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock
        # Where this runtime's in-process metrics register (a private registry by default).
        self._registry = registry

    @cached_property
    def clock(self) -> Clock:
        """The injected clock, else the one ``Settings.clock`` names."""
        if self._clock is not None:
            return self._clock
        if self.settings.clock == "redis":
            return RedisClock(self.redis, prefix=self.settings.redis_key_prefix)
        return SystemClock()

    @cached_property
    def redis(self) -> redis.Redis:
        return build_redis(self.settings)

    @cached_property
    def stand_in_redis(self) -> Redis:
        """The Redis the recording stand-ins for Kubernetes keep their records in."""
        url = self.settings.recording_redis_url
        return Redis.from_url(url) if url else self.redis

    @cached_property
    def queue(self) -> RedisSchedulerQueue:
        return RedisSchedulerQueue(
            self.redis,
            prefix=self.settings.redis_key_prefix,
            max_length=self.settings.queue_max_length,
        )

    @cached_property
    def store(self) -> StateStore:
        return StateStore(
            self.redis,
            prefix=self.settings.redis_key_prefix,
            history=self.settings.decision_history,
        )

    @cached_property
    def retention(self) -> JobRetention:
        return JobRetention(self.store, retention=self.settings.job_retention)

    @cached_property
    def report_intake(self) -> ReportIntake:
        """A report's one Lua call into the queue (``workers.intake``)."""
        return ReportIntake(
            self.redis,
            queue=self.queue,
            store=self.store,
            wait_replicas=self.settings.replicas_to_wait,
            wait_timeout_ms=self.settings.redis_wait_timeout_ms,
        )

    @cached_property
    def dead_letters(self) -> DeadLetters:
        return DeadLetters(
            self.redis,
            prefix=self.settings.redis_key_prefix,
            max_length=self.settings.dead_letter_max,
            field_max=self.settings.dead_letter_body_max,
        )

    @cached_property
    def metrics(self) -> RuntimeMetrics:
        return RuntimeMetrics(self._registry or CollectorRegistry())

    @cached_property
    def faults(self) -> FaultInjector:
        return FaultInjector(
            self.redis, prefix=self.settings.redis_key_prefix, enabled=self.settings.fault_injection
        )

    @cached_property
    def kube(self) -> Any:
        """This process's ``KubeAdapter`` (its one client); Kubernetes setups only."""
        kubernetes = importlib.import_module("workers.adapters.kubernetes")
        return kubernetes.KubeAdapter(self.settings, observe=_kube_observer(self.metrics))

    @cached_property
    def scaler(self) -> ReplicaScaler:
        if self.settings.scaler == "kubernetes":
            default: ReplicaScaler = self.kube.replica_scaler()
        else:
            default = RecordingScaler(
                self.stand_in_redis,
                prefix=self.settings.redis_key_prefix,
                clock=self.clock,
                faults=self.faults,
            )
        # KubeML parameter-server mode: a job with a ps_url is scaled through its server.
        return with_parameter_servers(default, store=self.store)

    @cached_property
    def cluster_reader(self) -> ClusterReader:
        """Reads without a cache (targeted requests): any process may use it."""
        if self.settings.scaler == "kubernetes":
            reader: ClusterReader = self.kube.direct_reader()
            return reader
        return StaticClusterReader(self.stand_in_redis, prefix=self.settings.redis_key_prefix)

    @cached_property
    def job_lookup(self) -> JobLookup:
        """Targeted reads of named jobs (the cluster reader's): which policy drives
        each, and the object read, handed on to the job's scale."""
        reader = self.cluster_reader
        if not isinstance(reader, JobLookup):
            raise TypeError(f"{type(reader).__name__} cannot look jobs up by name")
        return reader

    @cached_property
    def cluster_view(self) -> ClusterReader:
        """The planner's reader over the list-and-watch cache (built on first use).

        Only the autoscale round (queue ``control``: the planner) asks for it.
        """
        if self.settings.scaler == "kubernetes":
            view: ClusterReader = self.kube.cluster_reader()
            return view
        return self.cluster_reader

    def observed_job(self, job: str) -> dict[str, Any] | None:
        """The planner cache's copy of ``job``'s object, to hand to the scale worker."""
        if self.settings.scaler != "kubernetes":
            return None
        observed: dict[str, Any] | None = self.kube.observed_elastic_job(job)
        return observed
