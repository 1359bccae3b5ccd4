"""The one place trainscaler reads its environment: ``TRAINSCALER_*`` variables.

``Settings()`` is built once per process (see ``get_settings``) and passed
down; nothing else reads ``os.environ``. Sources, highest priority first:
keyword arguments, ``TRAINSCALER_*`` variables, then the connection details a
running embedded system left in its discovery file (``workers.discovery``;
off with ``TRAINSCALER_DISCOVER=false``).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from scheduler_core.identity import is_namespace
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX, check_key_prefix
from workers.discovery import discovered_settings, discovery_path

_FALSE = {"0", "false", "no", "off", ""}


def default_discovery_file() -> str:
    """Where ``trainscaler run`` leaves its connection details for this user."""
    return str(discovery_path(os.environ, home=Path.home()))


class DiscoveredSource(PydanticBaseSettingsSource):
    """Lowest priority: the running embedded system's connection settings.

    Skipped when ``discover`` is false (given as a keyword or as
    ``TRAINSCALER_DISCOVER``): ``trainscaler run`` and its children must never
    pick up another run's system.
    """

    def __init__(self, settings_cls: type[BaseSettings], init_kwargs: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._init_kwargs = init_kwargs

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ answers for all fields at once

    def _enabled(self) -> bool:
        if "discover" in self._init_kwargs:
            return bool(self._init_kwargs["discover"])
        return os.environ.get("TRAINSCALER_DISCOVER", "true").strip().lower() not in _FALSE

    def __call__(self) -> dict[str, Any]:
        if not self._enabled():
            return {}
        path = self._init_kwargs.get("discovery_file") or default_discovery_file()
        return discovered_settings(Path(path))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINSCALER_", extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        init_kwargs = getattr(init_settings, "init_kwargs", {})
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            file_secret_settings,
            DiscoveredSource(settings_cls, init_kwargs),
        )

    # --- Discovery of a running embedded system (``trainscaler run``) ---
    # Read its connection details (API URL and token, Redis URL, kubeconfig) when
    # they are not set otherwise.
    discover: bool = True
    # Where ``run`` writes them and clients look (see ``workers.discovery``).
    discovery_file: str = Field(default_factory=default_discovery_file)

    # --- Redis (broker, result backend, queue and state store) ---
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", repr=False)
    # A password kept apart from the URL (a Kubernetes Secret): URL-encoded into
    # ``redis_url`` when the settings are read, so any character is safe.
    redis_password: str | None = Field(default=None, repr=False)
    # For rediss:// URLs: certificate checking and an optional CA bundle.
    redis_ssl_cert_reqs: Literal["required", "optional", "none"] = "required"
    redis_ssl_ca_certs: str | None = None
    # Every runtime key starts with it; it must carry a Redis Cluster hash tag
    # (workers.adapters.redis_keys), so all of them share one slot.
    redis_key_prefix: str = DEFAULT_KEY_PREFIX

    # --- Bounded Redis (issue 16, REDIS part) ---
    # A finished job's keys expire this long after it finished, and it leaves the
    # list of jobs (workers.adapters.job_retention).
    job_retention: float = Field(default=86_400.0, gt=0)
    # Redis Sentinel (workers.adapters.redis_sentinel): "host:port,host:port". When
    # set, the broker, result backend, RedBeat, state store and queue all connect
    # to the primary the sentinels name; redis_url then gives only the data
    # nodes' password, user and database.
    redis_sentinels: Annotated[tuple[str, ...], NoDecode] = ()
    redis_sentinel_master: str = Field(default="mymaster", min_length=1)
    redis_sentinel_password: str | None = Field(default=None, repr=False)
    # Replicas a report's push waits for (Redis WAIT) before the report is
    # accepted: replication is asynchronous, and a failover right after the push
    # would otherwise lose a report the API already acknowledged. None means 1
    # under Sentinel, 0 (no WAIT) otherwise. A WAIT that times out is logged and
    # the report still accepted: WAIT bounds the window, it cannot close it.
    redis_wait_replicas: int | None = Field(default=None, ge=0)
    redis_wait_timeout_ms: int = Field(default=200, gt=0)

    # --- Celery runtime ---
    # Longer than the longest single task run (a scale call with its lock wait).
    broker_visibility_timeout: float = Field(default=600.0, gt=0)
    # How often a worker returns messages of dead workers past the visibility timeout.
    broker_restore_interval: float = Field(default=10.0, gt=0)
    result_expires: float = Field(default=3600.0, gt=0)
    autoscale_lock_ttl: float = Field(default=120.0, gt=0)
    scale_lock_ttl: float = Field(default=60.0, gt=0)
    schedule_batch: int = Field(default=200, ge=1)
    decision_history: int = Field(default=200, ge=1)
    dead_letter_max: int = Field(default=10_000, ge=1)
    # Each dead letter's body, payload, headers and error are cut to this many characters.
    dead_letter_body_max: int = Field(default=4096, ge=256)
    # A broker message with a bigger body is dead-lettered unread (workers.message_guard).
    task_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # Test-only: lets integration tests pause tasks and fail scale calls via Redis keys.
    fault_injection: bool = False
    # system: the wall clock. redis: the seconds stored at ``P clock:now``, set by
    # whoever drives time (replaying a recorded report stream; tests only).
    clock: Literal["system", "redis"] = "system"

    # --- Liveness (DEPLOY, issue 16; workers/heartbeat.py) ---
    # The file a worker's main process rewrites every ``heartbeat_interval`` seconds
    # for the pod's liveness probe (``trainscaler healthcheck``); empty: no heartbeat.
    heartbeat_file: str = ""
    heartbeat_interval: float = Field(default=5.0, gt=0)

    # --- Periodic work (Celery beat / RedBeat) ---
    autoscale_interval: float = Field(default=30.0, gt=0)
    lease_sweep_interval: float = Field(default=5.0, gt=0)

    # --- Policies ---
    # goodput: shortest estimated remaining time first (GPU jobs); edl: EDL's fair planner.
    cluster_policy: str = "goodput"
    job_policy: str = "throughput"
    # Parameters of the cluster policies, by policy (JSON), e.g.
    # {"goodput": {"efficiency_threshold": 0.8}}; the load cap below is added.
    cluster_policy_params: dict[str, dict[str, float | int | bool | str]] = {}
    max_load_desired: float = Field(default=0.97, gt=0, le=1)

    # --- Queue ---
    queue_max_length: int = Field(default=10_000, ge=1)
    lease_seconds: float = Field(default=60.0, gt=0)

    # --- Scale retries ---
    scale_max_retries: int = Field(default=8, ge=0)
    retry_backoff_base: float = Field(default=0.5, gt=0)
    retry_backoff_max: float = Field(default=30.0, gt=0)
    # A decision no scale applied within this long is sent again by sweep_leases
    # (a scale message is not recorded for redelivery: workers/adapters/pending_scales.py).
    scale_resend_after: float = Field(default=120.0, gt=0)

    # --- Which adapters to use ---
    scaler: Literal["kubernetes", "recording"] = "kubernetes"
    # Where the recording stand-ins for Kubernetes (the scaler and the cluster
    # reader of ``scaler=recording``) keep what they record; None: the runtime's
    # own Redis. bench/events.py gives them a Redis of their own, so the round
    # trips it counts on the runtime's Redis are the product's alone.
    recording_redis_url: str | None = Field(default=None, repr=False)
    # Epoch reports kept per job for the job views (GET /jobs/{id}).
    metrics_history: int = Field(default=100, ge=1)

    # --- Worker metrics (issue 16, METRICS part; workers.observability.worker_exposition) ---
    # The worker's main process serves /metrics here; 0: no listener.
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    worker_metrics_address: str = "127.0.0.1"
    # prometheus_client's multiprocess directory (its own variable, unprefixed): the
    # library reads it at import, so it must be set before the worker starts.
    prometheus_multiproc_dir: str | None = Field(
        default=None,
        validation_alias=AliasChoices("prometheus_multiproc_dir", "PROMETHEUS_MULTIPROC_DIR"),
    )

    # --- Scope ---
    # The namespaces trainscaler reads jobs from and scales in, comma-separated
    # (``TRAINSCALER_NAMESPACES=team-a,team-b``); empty means every namespace.
    # Enforced by the API, the tasks and the Kubernetes adapter (its watches).
    namespaces: Annotated[tuple[str, ...], NoDecode] = ()

    # --- Kubernetes ---
    kubeconfig: str | None = None
    kube_in_cluster: bool = False
    kube_qps: float = Field(default=20.0, gt=0)
    kube_burst: int = Field(default=40, ge=1)
    gpu_resource: str = "nvidia.com/gpu"
    kube_field_manager: str = "trainscaler"
    kube_cache_sync_timeout: float = Field(default=30.0, gt=0)
    kube_watch_timeout_seconds: int = Field(default=300, ge=1)

    # --- PLANNER (issue 16): ``trainscaler planner``'s Lease (coordination.k8s.io/v1) ---
    # client-go's defaults: lease 15 s, renew deadline 10 s, retry every 2 s.
    planner_lease_name: str = Field(default="trainscaler-planner", min_length=1, max_length=253)
    # Empty: the pod's own namespace in the cluster (its service account's), else "default".
    planner_lease_namespace: str = Field(default="", max_length=63)
    # Empty: ``<hostname>_<random>`` (a restarted pod is a new candidate).
    planner_identity: str = ""
    planner_lease_duration_seconds: int = Field(default=15, ge=2)
    planner_renew_deadline_seconds: float = Field(default=10.0, gt=0)
    planner_retry_period_seconds: float = Field(default=2.0, gt=0)

    # --- Trace-driven simulator (``trainscaler simulate``) ---
    # Folder of the measured traces and workloads; None = ../shared/data/pollux beside the repo.
    pollux_data_dir: str | None = None

    # --- HTTP API ---
    api_token: str | None = None
    api_auth_disabled: bool = False
    api_max_body_bytes: int = Field(default=1_048_576, ge=1)
    # Where the CLI's client commands (submit, report, jobs, status) find the API.
    api_url: str = "http://127.0.0.1:8000"

    # --- Flower ---
    # "user:password" for Flower's basic auth (``trainscaler flower``, the embedded run).
    flower_basic_auth: str | None = None

    # --- KubeML-compatible listener (``trainscaler kubeml-api``; docs/api.md) ---
    # KubeML's scheduler-wide psUrl (``scheduler.Start(logger, port, psUrl)``): the
    # parameter server of every job submitted through the KubeML listener.
    ps_url: str | None = None
    # KubeML sends no token: the listener starts only when this is set, and the
    # shipped manifests put it behind a NetworkPolicy (deploy/kubeml-api.yaml).
    kubeml_api_enabled: bool = False
    # KubeML has no namespaces or replica bounds: what its jobs get here.
    kubeml_namespace: str = Field(default="kubeml", min_length=1, max_length=63)
    kubeml_max_parallelism: int = Field(default=16, ge=1)
    # KubeML's scheduler /infer calls the Fission router's function directly.
    kubeml_router_url: str = "http://router.fission"
    kubeml_infer_function: str = "network"
    kubeml_infer_timeout: float = Field(default=60.0, gt=0)

    # --- Logging ---
    # "json": one JSON object per line (deployments); "text": readable lines (terminal).
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _password_into_url(cls, data: object) -> object:
        if not isinstance(data, dict) or not data.get("redis_password"):
            return data
        url = urlsplit(str(data.get("redis_url") or cls.model_fields["redis_url"].default))
        host = url.netloc.rpartition("@")[2]
        user = quote(unquote(url.username), safe="") if url.username else ""
        password = quote(str(data["redis_password"]), safe="")
        netloc = f"{user}:{password}@{host}"
        return {**data, "redis_url": urlunsplit(url._replace(netloc=netloc))}

    @field_validator("redis_key_prefix")
    @classmethod
    def _tagged_prefix(cls, value: str) -> str:
        return check_key_prefix(value)

    @field_validator("redis_sentinels", mode="before")
    @classmethod
    def _split_sentinels(cls, value: object) -> object:
        # "h1:26379,h2:26379" (operators) or a JSON list (the embedded system's children).
        if isinstance(value, str) and value.lstrip().startswith("["):
            return json.loads(value)
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _host_ports(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not v.rpartition(":")[2].isdigit() or not v.rpartition(":")[0]]
        if bad:
            raise ValueError(f"sentinels must be host:port: {', '.join(map(repr, bad))}")
        return value

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: object) -> object:
        # "a,b" (operators) or a JSON list (what the embedded system hands its children).
        if isinstance(value, str) and value.lstrip().startswith("["):
            return json.loads(value)
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("namespaces")
    @classmethod
    def _dns_labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [namespace for namespace in value if not is_namespace(namespace)]
        if bad:
            raise ValueError(f"not DNS-1123 labels: {', '.join(map(repr, bad))}")
        return tuple(sorted(set(value)))

    @property
    def replicas_to_wait(self) -> int:
        """How many replicas a report's push waits for (``redis_wait_replicas``)."""
        if self.redis_wait_replicas is not None:
            return self.redis_wait_replicas
        return 1 if self.redis_sentinels else 0

    def namespace_allowed(self, namespace: str) -> bool:
        """Whether trainscaler may read and scale jobs in this namespace."""
        return not self.namespaces or namespace in self.namespaces


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment exactly once."""
    return Settings()
