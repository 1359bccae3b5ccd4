"""The message guard: every raw broker message is checked before Celery parses it.

Celery's consumer (``celery.worker.consumer.Consumer.create_task_handler``)
unpacks a message's headers and body without checking their shape: a body of
``null``, ``5`` or ``"just a string"`` raises inside the consumer, the worker
logs ``Unrecoverable error`` and exits, and (acks late, reject on worker lost)
the message goes back to the queue to kill the next worker. The supported
hook is the worker's consumer class (``worker_consumer``): ``GuardedConsumer``
wraps the task handler Celery builds, so every message on every queue passes
``check_message`` first. A message that fails it, or that Celery's own
parsing still rejects, is dead-lettered with its queue, headers, raw body
(truncated) and the error, then acked: it is never redelivered and the worker
goes on with the next message.

What runs is exactly Celery protocol 2 as trainscaler's clients send it:
JSON (``application/json``) no bigger than ``Settings.task_max_body_bytes``,
a body ``[args, kwargs, embed]`` with no callbacks, chains or chords, headers
of the types Celery reads, a registered task name, and arguments that fit
the task's signature.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import redis
from celery import Task
from celery.worker.consumer import Consumer
from kombu.message import Message
from vine import promise as vine_promise

from workers.deadletters import DeadLetters
from workers.settings import get_settings
from workers.wiring import SystemClock, build_redis

logger = logging.getLogger(__name__)

JSON = "application/json"
# Headers Celery's Request reads, and the types it assumes for them.
_OPTIONAL_TEXT = ("shadow", "root_id", "parent_id", "group", "argsrepr", "kwargsrepr", "origin")
_OPTIONAL_TIME = ("eta", "expires")
_EMBED_KEYS = ("callbacks", "errbacks", "chain", "chord")


class HostileMessage(Exception):
    """A message no task can run; the text names the part that is wrong."""


def check_message(message: Message, *, tasks: Mapping[str, Task], max_body_bytes: int) -> None:
    """Raise ``HostileMessage`` unless Celery can run this message as sent."""
    headers = message.headers
    if not isinstance(headers, dict):
        raise HostileMessage("headers: expected an object")
    name = headers.get("task")
    if not isinstance(name, str) or not name:
        raise HostileMessage("headers.task: expected a task name (Celery protocol 2)")
    if not isinstance(headers.get("id"), str) or not headers["id"]:
        raise HostileMessage("headers.id: expected a task id")
    task = tasks.get(name)
    if task is None:
        raise HostileMessage(f"headers.task: unknown task {name[:200]!r}")
    _check_headers(headers)
    body = message.body
    size = len(body) if isinstance(body, bytes | str) else 0
    if size > max_body_bytes:
        raise HostileMessage(f"body: {size} bytes, more than the {max_body_bytes} allowed")
    if message.content_type != JSON:
        raise HostileMessage(f"content_type: {str(message.content_type)[:100]!r}, only JSON runs")
    try:
        payload = message.decode()  # type: ignore[no-untyped-call]
    except Exception as error:  # kombu raises DecodeError, ContentDisallowed, ValueError...
        raise HostileMessage(f"body: undecodable: {error}") from error
    args, kwargs = _split_body(payload)
    try:
        task.__header__(*args, **kwargs)
    except TypeError as error:
        raise HostileMessage(f"args: {error}") from error


def _check_headers(headers: Mapping[str, Any]) -> None:
    for key in _OPTIONAL_TEXT:
        if headers.get(key) is not None and not isinstance(headers[key], str):
            raise HostileMessage(f"headers.{key}: expected a string")
    for key in _OPTIONAL_TIME:
        value = headers.get(key)
        if value is None:
            continue
        try:
            datetime.fromisoformat(value)
        except (TypeError, ValueError) as error:
            raise HostileMessage(f"headers.{key}: expected an ISO 8601 time") from error
    retries = headers.get("retries", 0)
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise HostileMessage("headers.retries: expected a count")
    limits = headers.get("timelimit")
    if limits is not None and not (
        isinstance(limits, list)
        and len(limits) == 2
        and all(x is None or (isinstance(x, int | float) and x >= 0) for x in limits)
    ):
        raise HostileMessage("headers.timelimit: expected [soft, hard] seconds or nulls")
    if headers.get("ignore_result") not in (None, True, False):
        raise HostileMessage("headers.ignore_result: expected true or false")


def _split_body(payload: object) -> tuple[list[Any], dict[str, Any]]:
    if not (
        isinstance(payload, list)
        and len(payload) == 3
        and isinstance(payload[0], list)
        and isinstance(payload[1], dict)
        and isinstance(payload[2], dict)
    ):
        raise HostileMessage("body: expected [args, kwargs, embed]: a list and two objects")
    args, kwargs, embed = payload
    if any(not isinstance(key, str) for key in kwargs):
        raise HostileMessage("kwargs: expected names")
    # trainscaler sends no callbacks, chains or chords; a message that carries
    # them was not sent by trainscaler and would run more than its task.
    if set(embed) - set(_EMBED_KEYS) or any(embed.get(key) for key in _EMBED_KEYS):
        raise HostileMessage("body.embed: callbacks, chains and chords are not accepted")
    return args, kwargs


@lru_cache(maxsize=1)
def _dead_letters() -> DeadLetters:
    """This worker process's dead letters (its own Redis client, built on first use)."""
    settings = get_settings()
    return DeadLetters(
        build_redis(settings),
        prefix=settings.redis_key_prefix,
        max_length=settings.dead_letter_max,
        field_max=settings.dead_letter_body_max,
    )


def dead_letter_raw(*, queue: str, raw: bytes | str, error: str) -> None:
    """A list item that is not even an envelope (``workers.guarded_transport``).

    It is already off its list: dead-lettered if Redis takes the letter, else
    only logged (the item cannot be put back as what it was not).
    """
    try:
        _dead_letters().add(
            task="(none)", payload=None, error=error, at=SystemClock().now(), queue=queue,
            headers={}, raw_body=raw,
        )  # fmt: skip
    except redis.RedisError:
        logger.exception("could not dead-letter a raw item from %s: %s", queue, error)
        return
    logger.warning("dead-lettered a raw item from %s: %s", queue, error[:500])


class GuardedConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer with ``check_message`` in front of its task handler."""

    def create_task_handler(
        self, promise: Callable[..., Any] = vine_promise
    ) -> Callable[[Message], Any]:
        celery_handler: Callable[[Message], Any] = super().create_task_handler(promise)
        max_body_bytes = get_settings().task_max_body_bytes
        connection_errors = tuple(self.connection_errors)

        def on_task_received(message: Message) -> Any:
            try:
                check_message(message, tasks=self.app.tasks, max_body_bytes=max_body_bytes)
            except HostileMessage as problem:
                return self._dead_letter(message, str(problem))
            try:
                return celery_handler(message)
            except connection_errors:
                raise  # the broker went away: Celery reconnects and redelivers
            except Exception as error:  # Celery's own parsing refused what passed the check
                if message.acknowledged:
                    logger.exception("message failed after it was acknowledged")
                    return None
                return self._dead_letter(message, f"{type(error).__name__}: {error}")

        return on_task_received

    def _dead_letter(self, message: Message, error: str) -> None:
        headers = message.headers if isinstance(message.headers, dict) else {}
        task = headers.get("task")
        try:
            _dead_letters().add(
                task=task if isinstance(task, str) else "(none)",
                payload=None,
                error=error,
                at=SystemClock().now(),
                queue=str((message.delivery_info or {}).get("routing_key") or ""),
                headers=headers,
                raw_body=message.body if isinstance(message.body, bytes | str) else b"",
            )
        except redis.RedisError:
            # Not recorded, so not dropped: back on its queue for another try.
            logger.exception("could not dead-letter a message; requeued")
            message.reject_log_error(logger, self.connection_errors, requeue=True)  # type: ignore[no-untyped-call]
            return
        logger.warning("dead-lettered a message: %s", error[:500])
        message.ack_log_error(logger, self.connection_errors)  # type: ignore[no-untyped-call]
