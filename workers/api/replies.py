"""Waiting for the runtime's answer by notification: a reply key and ``BLPOP``.

A route makes a reply key (``workers.intake.new_reply_key``), hands it over
with its request and waits here: one ``BLPOP`` on an asyncio Redis client, so
a wait holds no thread, bounded by the route's ``wait``. No polling. A route
that stops waiting loses nothing: the decision is made and recorded all the
same, and its answer expires with the key (``workers.intake.REPLY_TTL_S``).
"""

from __future__ import annotations

import asyncio

import redis.asyncio

from workers.settings import Settings
from workers.wiring import build_async_redis

# BLPOP's timeout has millisecond resolution; 0 would mean "forever".
_SHORTEST_S = 0.001


class ReplyWaiter:
    """``BLPOP`` on reply keys, with one asyncio client per event loop."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: redis.asyncio.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _connected(self) -> redis.asyncio.Redis:
        # An asyncio client's connections belong to the loop that made them.
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = build_async_redis(self._settings)
            self._loop = loop
        return self._client

    async def wait(self, key: str, *, timeout: float) -> str | None:
        """The answer pushed to ``key`` within ``timeout`` seconds, else None (0: no wait)."""
        if timeout <= 0:
            return None
        popped = await self._connected().blpop([key], timeout=max(round(timeout, 3), _SHORTEST_S))
        if popped is None:
            return None
        value = popped[1]
        return value.decode() if isinstance(value, bytes) else str(value)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
