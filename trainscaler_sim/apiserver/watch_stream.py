"""Streaming one WATCH response: newline-delimited JSON events in HTTP chunks,
closed after ``timeoutSeconds``, with optional BOOKMARK events."""

from __future__ import annotations

import json
import queue
import select
import socket
import threading
import time
from collections.abc import Callable

from .json_types import JsonObject
from .reads import OpenedWatch
from .resources import ResourceType
from .store import ObjectStore

# Without timeoutSeconds the real server picks 30-60 minutes.
DEFAULT_WATCH_SECONDS = 1800.0
_IDLE_POLL_SECONDS = 0.25


def client_has_gone(connection: socket.socket) -> bool:
    """A readable socket that yields no bytes means the peer closed it."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        if not readable:
            return False
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def encode_event(event_type: str, obj: JsonObject) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def stream_events(
    *,
    store: ObjectStore,
    resource_type: ResourceType,
    opened: OpenedWatch,
    timeout_seconds: float,
    bookmark_seconds: float | None,
    write_chunk: Callable[[bytes], None],
    client_gone: Callable[[], bool],
    stopping: threading.Event,
    transform: Callable[[str, JsonObject], JsonObject] | None = None,
) -> None:
    """Send backlog then live events until the timeout, server stop or disconnect.

    ``transform`` rewrites each event's object (e.g. into a one-row Table).
    """

    def encoded(kind: str, obj: JsonObject) -> bytes:
        return encode_event(kind, transform(kind, obj) if transform else obj)

    deadline = time.monotonic() + timeout_seconds
    subscription = opened.subscription
    last_bookmark = time.monotonic()
    try:
        pending = b"".join(encoded(kind, obj) for kind, obj in opened.backlog)
        if pending:
            write_chunk(pending)
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                event = subscription.events.get(timeout=min(remaining, _IDLE_POLL_SECONDS))
            except queue.Empty:
                if client_gone():
                    return
                if (
                    bookmark_seconds is not None
                    and time.monotonic() - last_bookmark >= bookmark_seconds
                ):
                    last_bookmark = time.monotonic()
                    with store.lock:
                        # Only safe to claim "seen up to now" when nothing is queued.
                        version = (
                            store.current_resource_version()
                            if subscription.events.empty()
                            else None
                        )
                    if version is not None:
                        bookmark = {
                            "kind": resource_type.kind,
                            "apiVersion": resource_type.api_version,
                            "metadata": {"resourceVersion": str(version)},
                        }
                        write_chunk(encode_event("BOOKMARK", bookmark))
                continue
            batch = [event]
            while True:
                try:
                    batch.append(subscription.events.get_nowait())
                except queue.Empty:
                    break
            data = b"".join(
                encoded(kind, obj)
                for kind, obj in filter(None, map(opened.translator.translate, batch))
            )
            if data:
                write_chunk(data)
    finally:
        store.unsubscribe(subscription)
