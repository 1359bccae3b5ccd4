"""Loopback port choice: a wanted port when it is free, any free port otherwise.

Probing binds with ``SO_REUSEADDR`` like the servers themselves do, so a port
left in ``TIME_WAIT`` counts as free and a port someone listens on does not.
"""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def loopback_url(port: int) -> str:
    """The HTTP address of a server of this run listening on loopback ``port``."""
    return f"http://{LOOPBACK}:{port}"


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel just handed out (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def choose_port(wanted: int | None, host: str = LOOPBACK) -> int:
    """``wanted`` when it is free; a free port when it is taken, 0 or None."""
    if wanted and port_is_free(wanted, host):
        return wanted
    return free_port(host)


def port_in_use(port: int, host: str = LOOPBACK, *, timeout: float = 0.5) -> bool:
    """True when something accepts connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False
