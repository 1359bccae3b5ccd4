"""Dead letters: payloads and operations the runtime gave up on, kept in Redis.

A payload that fails validation is never retried: it lands here with the
task name, the payload, the error and the time. A ``scale`` that exhausted its
retries (or hit a permanent error) lands here with its error too. The list
``P deadletters`` holds JSON ``DeadLetter`` entries, newest first, bounded by
``Settings.dead_letter_max``.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, ValidationError


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str
    payload: Any
    error: str
    at: float


class DeadLetters:
    def __init__(self, client: redis.Redis, *, prefix: str, max_length: int) -> None:
        self._redis = client
        self._key = f"{prefix}deadletters"
        self._max_length = max_length

    def add(self, *, task: str, payload: Any, error: str, at: float) -> DeadLetter:
        letter = DeadLetter(task=task, payload=_jsonable(payload), error=error, at=at)
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


def _jsonable(payload: Any) -> Any:
    # Whatever came in, the letter must round-trip through JSON.
    try:
        json.dumps(payload, allow_nan=False)
        return payload
    except (TypeError, ValueError):
        return repr(payload)
