"""The broker transport: kombu's Redis transport, refusing list items that are not envelopes.

Kombu's Redis channel pops an item off a queue's list (``BRPOP``) and parses
it as its JSON envelope (``body``, ``properties`` with ``delivery_tag`` and
``delivery_info``, ``headers``...) inside the worker's event loop, without
checking it: bytes pushed straight onto a list (``not json``, ``null``,
``{"body": 5}``) raise there, and the worker exits. ``GuardedChannel``
checks the item before it is delivered; one that is not an envelope is
dead-lettered with its queue and raw bytes (``workers.message_guard``) and
dropped (it was already off the list). Envelopes go on to Celery's consumer,
where the message guard checks the message itself.

It also owns which deliveries kombu records for redelivery
(``SelectiveQoS``). Kombu's ack emulation costs two Redis round trips per
message besides its delivery: the unacked record when it is delivered and its
removal at the ack. A task named in the transport option ``unrecorded_tasks``
skips both: its message only triggers work whose delivery Redis already
guarantees elsewhere (``trainscaler.schedule``: the reports it decides are
leased in the SchedulerQueue, and ``sweep_leases`` sends it again while
anything waits), so redelivering the message itself would add nothing.

Selected by ``broker_transport`` in ``workers/celery_app.py``; ``redis://``
and ``rediss://`` URLs work as before.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from queue import Empty
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from workers.message_guard import dead_letter_raw

_log = logging.getLogger(__name__)

_TEXT_OR_NONE = ("content-type", "content-encoding")


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else raw


class NotAnEnvelope(ValueError):
    """A list item kombu cannot turn into a message; the text says why."""


def parse_envelope(item: bytes | str) -> dict[str, Any]:
    """The item as kombu's envelope, or ``NotAnEnvelope``."""
    try:
        payload = json.loads(_text(item))
    except (ValueError, UnicodeDecodeError) as error:
        raise NotAnEnvelope(f"envelope: not JSON: {error}") from error
    if not isinstance(payload, dict):
        raise NotAnEnvelope("envelope: expected an object")
    properties = payload.get("properties")
    if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
        raise NotAnEnvelope("envelope.properties.delivery_tag: expected a string")
    info = properties.get("delivery_info")
    if not isinstance(info, dict) or not all(
        isinstance(info.get(key), str) for key in ("exchange", "routing_key")
    ):
        raise NotAnEnvelope("envelope.properties.delivery_info: expected exchange and routing_key")
    body = payload.get("body")
    if body is not None and not isinstance(body, str):
        raise NotAnEnvelope("envelope.body: expected a string")
    encoding = properties.get("body_encoding")
    if encoding not in (None, "base64"):
        raise NotAnEnvelope("envelope.properties.body_encoding: expected base64")
    if body and encoding == "base64":
        try:
            base64.b64decode(body.encode(), validate=True)
        except (binascii.Error, ValueError) as error:
            raise NotAnEnvelope("envelope.body: not base64") from error
    if payload.get("headers") is not None and not isinstance(payload["headers"], dict):
        raise NotAnEnvelope("envelope.headers: expected an object")
    for key in _TEXT_OR_NONE:
        if payload.get(key) is not None and not isinstance(payload[key], str):
            raise NotAnEnvelope(f"envelope.{key}: expected a string")
    return payload


class SelectiveQoS(kombu_redis.QoS):
    """Kombu's Redis ack emulation, except for the channel's ``unrecorded_tasks``.

    Their deliveries are kept in this process only, as kombu's own QoS does
    with ack emulation off: an ack costs no round trip, a reject with requeue
    and a restore at shutdown put the message back on its queue, and a worker
    that dies loses it (the work it triggers is leased elsewhere).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._unrecorded: set[str] = set()

    def append(self, message: Any, delivery_tag: str) -> None:
        if (message.headers or {}).get("task") in self.channel.unrecorded_tasks:
            self._unrecorded.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().append(message, delivery_tag)  # type: ignore[no-untyped-call]

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag in self._unrecorded:
            self._unrecorded.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().ack(delivery_tag)  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if delivery_tag in self._unrecorded:
            if requeue:
                self._put_back(self._delivered[delivery_tag], served_next=False)
            self.ack(delivery_tag)
            return
        super().reject(delivery_tag, requeue=requeue)  # type: ignore[no-untyped-call]

    def restore_unacked(self, client: Any = None) -> None:
        for tag in [tag for tag in self._delivered if tag in self._unrecorded]:
            self._unrecorded.discard(tag)
            try:
                self._put_back(self._delivered.pop(tag), served_next=True)
            except self.channel.connection_errors:
                # Redis gone at shutdown: sweep_leases redoes what it carried, and
                # the recorded messages below must still be restored.
                _log.warning("could not put back unrecorded delivery %s", tag, exc_info=True)
        super().restore_unacked(client)  # type: ignore[no-untyped-call]

    def _put_back(self, message: Any, *, served_next: bool) -> None:
        # Where kombu puts a recorded message back: a rejected one behind the
        # others (its ``leftmost``: kombu pushes left and pops right), one
        # restored at shutdown where it was.
        delivery = message.delivery_info
        with self.channel.conn_or_acquire() as client, client.pipeline() as pipe:
            self.channel._do_restore_message(
                message._raw,
                delivery["exchange"],
                delivery["routing_key"],
                pipe,
                leftmost=not served_next,
            )
            pipe.execute()


class GuardedChannel(kombu_redis.Channel):
    """Kombu 5.7's ``Channel._brpop_read`` with the envelope checked before delivery,
    and ``SelectiveQoS`` for its deliveries."""

    QoS = SelectiveQoS
    #: Task names whose deliveries are not recorded for redelivery (``SelectiveQoS``).
    unrecorded_tasks: frozenset[str] = frozenset()
    from_transport_options = (  # type: ignore[assignment]
        *kombu_redis.Channel.from_transport_options,
        "unrecorded_tasks",
    )

    def _brpop_read(self, **options: Any) -> bool:
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                # As kombu: disconnect, so the next iteration reconnects.
                self.client.connection.disconnect()
                raise
            if not dest__item:
                raise Empty()
            dest, item = dest__item
            dest = _text(dest).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(dest)
            try:
                payload = parse_envelope(item)
            except NotAnEnvelope as problem:
                dead_letter_raw(queue=dest, raw=item, error=str(problem))
                return True
            self.connection._deliver(payload, dest)
            return True
        finally:
            self._in_poll = None  # type: ignore[assignment]
            self._flush_brpop_reauth()  # type: ignore[no-untyped-call]


class GuardedRedisTransport(kombu_redis.Transport):
    Channel = GuardedChannel


class GuardedSentinelChannel(GuardedChannel, kombu_redis.SentinelChannel):
    """The guarded read, on a connection to the primary the sentinels name."""

    # The sentinel options (master_name...) as well as ours.
    from_transport_options = (  # type: ignore[assignment]
        *kombu_redis.SentinelChannel.from_transport_options,
        "unrecorded_tasks",
    )


class GuardedSentinelTransport(kombu_redis.SentinelTransport):
    Channel = GuardedSentinelChannel
