"""ASGI middleware of the API: request ids, access log and metrics, body-size limit.

* ``RequestIdMiddleware`` (outermost): every response carries ``X-Request-ID``
  (the caller's, when it is a sane token, else a new one); it logs one line
  per request, observes the request metrics, and turns any exception that
  escaped the routes into a JSON 500 that still carries the id.
* ``BodySizeLimitMiddleware``: a body over ``Settings.api_max_body_bytes`` gets
  413 before any route reads it (by ``Content-Length`` up front, and by
  counting for chunked bodies).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.observability.metrics import ApiMetrics

log = logging.getLogger("workers.api.access")

REQUEST_ID_HEADER = "x-request-id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def send_json(send: Send, status: int, *, body: dict[str, Any], request_id: str) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (REQUEST_ID_HEADER.encode(), request_id.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def request_id_of(scope: Scope) -> str:
    state: MutableMapping[str, Any] = scope.setdefault("state", {})
    return str(state.get("request_id", ""))


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, REQUEST_ID_HEADER.encode())
        request_id = given if given and _SANE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = int(message["status"])
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"
                ]
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error", extra={"request_id": request_id})
            if not response_started:
                status = 500
                await send_json(
                    send,
                    500,
                    body={"detail": "internal error", "request_id": request_id},
                    request_id=request_id,
                )
        finally:
            seconds = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe(
                method=scope["method"], route=template, status=status, seconds=seconds
            )
            log.info(
                "%s %s %s",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                },
            )


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_body_bytes
            except ValueError:
                await self._reject(
                    send, 400, detail="Content-Length is not a number", request_id=request_id
                )
                return
            if too_big:
                await self._too_big(send, request_id)
                return
        # Read the body now, counting, so a chunked body cannot exceed the limit either.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_big(send, request_id)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_big(self, send: Send, request_id: str) -> None:
        await self._reject(
            send,
            413,
            detail=f"request body is larger than {self.max_body_bytes} bytes "
            "(TRAINSCALER_API_MAX_BODY_BYTES)",
            request_id=request_id,
        )

    @staticmethod
    async def _reject(send: Send, status: int, *, detail: str, request_id: str) -> None:
        await send_json(send, status, body={"detail": detail}, request_id=request_id)
