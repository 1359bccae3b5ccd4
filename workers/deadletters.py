"""Dead letters: messages, payloads and operations the runtime gave up on, kept in Redis.

A payload that fails validation is never retried: it lands here with the
task name, the payload, the error and the time. A raw broker message no task
can run (see ``workers.message_guard``) lands here with its queue, headers and
raw body. A ``scale`` that exhausted its retries (or hit a permanent error)
lands here with its error too. The list ``P deadletters`` holds JSON
``DeadLetter`` entries, newest first, bounded by ``Settings.dead_letter_max``;
every field is bounded by ``Settings.dead_letter_body_max`` characters, so a
2 MB body costs Redis no more than a small one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, ValidationError

TRUNCATED = "...[truncated]"


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    payload: Any
    error: str
    at: float
    # Raw broker messages only: where it came from and what it was.
    queue: str | None = None
    headers: dict[str, Any] | None = None
    raw_body: str | None = None
    body_bytes: int | None = None


class DeadLetters:
    def __init__(
        self, client: redis.Redis, *, prefix: str, max_length: int, field_max: int = 4096
    ) -> None:
        self._redis = client
        self._key = f"{prefix}deadletters"
        self._max_length = max_length
        self._field_max = field_max

    def add(
        self,
        *,
        task: str,
        payload: Any,
        error: str,
        at: float,
        queue: str | None = None,
        headers: Mapping[str, Any] | None = None,
        raw_body: bytes | str | None = None,
    ) -> DeadLetter:
        bound = self._field_max
        letter = DeadLetter(
            task=truncate(task, 255),
            payload=_bounded(payload, bound),
            error=truncate(error, bound),
            at=at,
            queue=None if queue is None else truncate(queue, 255),
            headers=None if headers is None else _bounded_headers(headers, bound),
            raw_body=None if raw_body is None else truncate(_text(raw_body), bound),
            body_bytes=None if raw_body is None else len(raw_body),
        )
        pipe = self._redis.pipeline()
        pipe.lpush(self._key, letter.model_dump_json())
        pipe.ltrim(self._key, 0, self._max_length - 1)
        pipe.execute()
        return letter

    def list(self, *, limit: int = 100) -> list[DeadLetter]:
        raw = self._redis.lrange(self._key, 0, max(limit, 1) - 1)
        return [DeadLetter.model_validate_json(r) for r in raw]

    def count(self) -> int:
        return int(self._redis.llen(self._key))

    def purge(self) -> int:
        pipe = self._redis.pipeline()
        pipe.llen(self._key)
        pipe.delete(self._key)
        count, _ = pipe.execute()
        return int(count)


def validation_message(error: ValidationError) -> str:
    """One readable line per problem: ``field: message``."""
    parts = []
    for problem in error.errors():
        where = ".".join(str(x) for x in problem.get("loc", ())) or "payload"
        parts.append(f"{where}: {problem.get('msg', 'invalid')}")
    return "; ".join(parts)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - len(TRUNCATED), 0)] + TRUNCATED


def _text(raw: bytes | str) -> str:
    # Undecodable bytes stay visible as escapes rather than failing the letter.
    return raw.decode("utf-8", errors="backslashreplace") if isinstance(raw, bytes) else raw


def _bounded(payload: Any, limit: int) -> Any:
    # Whatever came in, the letter must round-trip through JSON and stay small.
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError):
        return truncate(repr(payload), limit)
    return payload if len(text) <= limit else truncate(text, limit)


def _bounded_headers(headers: Mapping[str, Any], limit: int) -> dict[str, Any]:
    per_value = max(limit // max(len(headers), 1), 64)
    return {truncate(str(k), 255): _bounded(v, per_value) for k, v in list(headers.items())[:64]}
