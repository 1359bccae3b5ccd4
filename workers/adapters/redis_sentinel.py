"""Redis high availability: every client finds the current primary through Sentinel.

Owns how trainscaler's Redis clients connect when ``Settings.redis_sentinels``
is set: the state store and the SchedulerQueue (``redis.sentinel``), the Celery
broker (kombu's ``sentinel://`` transport, guarded like the plain one), the
result backend (Celery's ``sentinel://`` backend) and RedBeat (its
``redis-sentinel`` mode). Each asks the sentinels for the primary of
``redis_sentinel_master`` and asks again after a failover. ``redis_url`` then
only supplies the data nodes' password, user and database; the sentinels have
their own password (``redis_sentinel_password``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import redis
import redis.asyncio
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

from workers.settings import Settings

PLAIN_TRANSPORT = "workers.guarded_transport:GuardedRedisTransport"
SENTINEL_TRANSPORT = "workers.guarded_transport:GuardedSentinelTransport"
# How long RedBeat keeps retrying while the sentinels elect a new primary.
REDBEAT_RETRY_PERIOD = 60


@dataclass(frozen=True)
class DataAuth:
    """What ``redis_url`` says about the data nodes: credentials and database."""

    username: str | None
    password: str | None
    db: int


@dataclass(frozen=True)
class CeleryRedis:
    """Where Celery's broker, result backend and RedBeat connect, and with what options."""

    broker_url: str
    backend_url: str
    transport: str
    transport_options: dict[str, Any] = field(default_factory=dict)
    redbeat_url: str = ""
    redbeat_options: dict[str, Any] = field(default_factory=dict)


def data_auth(settings: Settings) -> DataAuth:
    url = urlsplit(settings.redis_url)
    path = url.path.strip("/")
    return DataAuth(
        username=unquote(url.username) if url.username else None,
        password=unquote(url.password) if url.password is not None else None,
        db=int(path) if path.isdigit() else 0,
    )


def sentinel_addresses(settings: Settings) -> list[tuple[str, int]]:
    addresses = []
    for entry in settings.redis_sentinels:
        host, _, port = entry.rpartition(":")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def _sentinel_kwargs(settings: Settings, *, socket_timeout: float) -> dict[str, Any]:
    options: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
    }
    if settings.redis_sentinel_password:
        options["password"] = settings.redis_sentinel_password
    return options


def sentinel_client(settings: Settings, **options: Any) -> redis.Redis:
    """A client of the current primary; it asks the sentinels again after a failover."""
    auth = data_auth(settings)
    timeout = float(options.get("socket_connect_timeout", 5.0))
    sentinel = Sentinel(
        sentinel_addresses(settings),
        sentinel_kwargs=_sentinel_kwargs(settings, socket_timeout=timeout),
        username=auth.username,
        password=auth.password,
        db=auth.db,
        **options,
    )
    client: redis.Redis = sentinel.master_for(settings.redis_sentinel_master)
    return client


def async_sentinel_client(settings: Settings, **options: Any) -> redis.asyncio.Redis:
    """``sentinel_client`` for asyncio (the API's waits on reply keys)."""
    auth = data_auth(settings)
    timeout = float(options.get("socket_connect_timeout", 5.0))
    sentinel = AsyncSentinel(
        sentinel_addresses(settings),
        sentinel_kwargs=_sentinel_kwargs(settings, socket_timeout=timeout),
        username=auth.username,
        password=auth.password,
        db=auth.db,
        **options,
    )
    client: redis.asyncio.Redis = sentinel.master_for(settings.redis_sentinel_master)
    return client


def _kombu_url(settings: Settings) -> str:
    """``sentinel://[:password@]host:port/db`` per sentinel, joined by ``;`` (kombu's form).

    The password here is the data nodes' (kombu and Celery log in to the primary with it).
    """
    auth = data_auth(settings)
    user = quote(auth.username, safe="") if auth.username else ""
    secret = f"{user}:{quote(auth.password, safe='')}@" if auth.password else ""
    return ";".join(
        f"sentinel://{secret}{host}:{port}/{auth.db}" for host, port in sentinel_addresses(settings)
    )


def celery_redis(settings: Settings) -> CeleryRedis:
    """Celery's connections: the plain URL, or the sentinels when configured."""
    if not settings.redis_sentinels:
        return CeleryRedis(
            broker_url=settings.redis_url,
            backend_url=settings.redis_url,
            transport=PLAIN_TRANSPORT,
            redbeat_url=settings.redis_url,
        )
    auth = data_auth(settings)
    url = _kombu_url(settings)
    located = {
        "master_name": settings.redis_sentinel_master,
        "sentinel_kwargs": _sentinel_kwargs(settings, socket_timeout=5.0),
    }
    redbeat: dict[str, Any] = {
        "sentinels": sentinel_addresses(settings),
        "service_name": settings.redis_sentinel_master,
        "sentinel_kwargs": _sentinel_kwargs(settings, socket_timeout=5.0),
        "password": auth.password,
        "db": auth.db,
        "socket_timeout": 5.0,
        "retry_period": REDBEAT_RETRY_PERIOD,
    }
    if auth.username:
        redbeat["username"] = auth.username
    return CeleryRedis(
        broker_url=url,
        backend_url=url,
        transport=SENTINEL_TRANSPORT,
        transport_options=located,
        redbeat_url="redis-sentinel://",
        redbeat_options=redbeat,
    )
