"""Conversion between core/v1 Events (the storage form) and events.k8s.io/v1 Events."""

from __future__ import annotations

from typing import Any

from .json_types import JsonObject


def _micro(timestamp: Any) -> Any:
    """events.k8s.io eventTime is a MicroTime; core timestamps have seconds only."""
    if isinstance(timestamp, str) and timestamp.endswith("Z") and "." not in timestamp:
        return timestamp[:-1] + ".000000Z"
    return timestamp


def _compact(obj: JsonObject) -> JsonObject:
    return {key: value for key, value in obj.items() if value is not None}


def to_events_v1(core: JsonObject) -> JsonObject:
    """Present a stored core Event as events.k8s.io/v1."""
    meta = core.get("metadata") or {}
    source = core.get("source") or {}
    # eventTime is required by typed clients; core-created events fall back to
    # their first timestamp (or creation time) rather than null.
    event_time = core.get("eventTime") or _micro(
        core.get("firstTimestamp") or meta.get("creationTimestamp")
    )
    return _compact(
        {
            "kind": "Event",
            "apiVersion": "events.k8s.io/v1",
            "metadata": meta,
            "eventTime": event_time,
            "series": core.get("series"),
            "reportingController": core.get("reportingComponent") or source.get("component"),
            "reportingInstance": core.get("reportingInstance") or source.get("host"),
            "action": core.get("action"),
            "reason": core.get("reason"),
            "regarding": core.get("involvedObject"),
            "related": core.get("related"),
            "note": core.get("message"),
            "type": core.get("type"),
            "deprecatedSource": core.get("source"),
            "deprecatedFirstTimestamp": core.get("firstTimestamp"),
            "deprecatedLastTimestamp": core.get("lastTimestamp"),
            "deprecatedCount": core.get("count"),
        }
    )


def from_events_v1(event: JsonObject) -> JsonObject:
    """Store an events.k8s.io/v1 Event in its core/v1 form."""
    source = event.get("deprecatedSource")
    if not source and event.get("reportingController"):
        source = {"component": event.get("reportingController")}
    return _compact(
        {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": event.get("metadata") or {},
            "involvedObject": event.get("regarding") or {},
            "reason": event.get("reason"),
            "message": event.get("note"),
            "source": source,
            "firstTimestamp": event.get("deprecatedFirstTimestamp"),
            "lastTimestamp": event.get("deprecatedLastTimestamp"),
            "count": event.get("deprecatedCount"),
            "type": event.get("type"),
            "eventTime": event.get("eventTime"),
            "series": event.get("series"),
            "action": event.get("action"),
            "related": event.get("related"),
            "reportingComponent": event.get("reportingController"),
            "reportingInstance": event.get("reportingInstance"),
        }
    )
