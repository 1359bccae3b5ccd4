"""Serving the real API for tests: uvicorn on a free loopback port, in a thread.

``ServedApi`` binds a socket to port 0 first (no fixed ports, no race),
runs ``uvicorn.Server`` on it in a daemon thread and stops it on exit; every
wait has a timeout. ``api_stack`` (module scope) is one Redis, one real
Celery worker subprocess and two servers of the same runtime: one with
bearer-token auth, one with auth disabled.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
import uvicorn
from starlette.applications import Starlette

from tests.integration.conftest import BASE_ENV, Procs, settings_for
from workers.adapters.redis_server import EmbeddedRedis
from workers.api.app import create_app
from workers.settings import Settings
from workers.wiring import Runtime

TOKEN = "test-token-7f3a"


class ServedApi:
    """One uvicorn server of ``app`` on a free loopback port, in a thread."""

    def __init__(self, app: Starlette, *, start_timeout: float = 15.0) -> None:
        self.app = app
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._start_timeout = start_timeout

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServedApi:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"API server not started within {self._start_timeout}s")
            time.sleep(0.02)
        return self

    def alive(self) -> bool:
        return self._thread.is_alive() and self.server.started and not self.server.should_exit

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        self._socket.close()

    def __enter__(self) -> ServedApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ApiStack:
    redis_url: str
    settings: Settings
    runtime: Runtime
    secured: ServedApi
    open: ServedApi
    procs: Procs
    redis: redis.Redis

    def client(self, *, auth: bool = True, token: str | None = TOKEN) -> httpx.Client:
        if auth:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.Client(base_url=self.secured.url, headers=headers, timeout=15.0)
        return httpx.Client(base_url=self.open.url, timeout=15.0)


def stack_env(redis_url: str) -> dict[str, str]:
    env = {**BASE_ENV, "TRAINSCALER_REDIS_URL": redis_url, "TRAINSCALER_API_TOKEN": TOKEN}
    # No test-only faults here: every scale succeeds.
    env["TRAINSCALER_FAULT_INJECTION"] = "false"
    # Beat is not running; a long interval keeps the autoscale quiet anyway.
    env["TRAINSCALER_AUTOSCALE_INTERVAL"] = "3600"
    return env


@pytest.fixture(scope="module")
def api_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiStack]:
    tmp: Path = tmp_path_factory.mktemp("api")
    with EmbeddedRedis(data_dir=tmp / "redis") as server:
        env = stack_env(server.url)
        settings = settings_for(env)
        open_settings = settings.model_copy(update={"api_auth_disabled": True, "api_token": None})
        runtime = Runtime(settings)
        procs = Procs(env=env, logs=tmp)
        client = redis.Redis.from_url(server.url)
        try:
            procs.worker("api-worker")
            secured = ServedApi(create_app(settings, runtime=runtime)).start()
            opened = ServedApi(create_app(open_settings, runtime=runtime)).start()
            try:
                yield ApiStack(
                    redis_url=server.url,
                    settings=settings,
                    runtime=runtime,
                    secured=secured,
                    open=opened,
                    procs=procs,
                    redis=client,
                )
            finally:
                secured.stop()
                opened.stop()
        finally:
            procs.stop_all()
            client.close()
