"""JSON object aliases, dotted-path access and timestamps shared by the apiserver modules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

JsonObject = dict[str, Any]
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    """The default clock: wall time in UTC."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Kubernetes timestamps have second precision and a literal Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def metadata(obj: JsonObject) -> JsonObject:
    """The object's metadata dict, created if missing."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def split_path(dotted: str) -> list[str]:
    """'.spec.replicas' -> ['spec', 'replicas'] (CRD scale paths start with a dot)."""
    return [part for part in dotted.split(".") if part]


def get_path(obj: Any, dotted: str) -> Any:
    """The value at a dotted path, or None when any step is missing."""
    current = obj
    for part in split_path(dotted):
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current


def set_path(obj: JsonObject, dotted: str, *, value: Any) -> None:
    """Set a value at a dotted path, creating intermediate maps."""
    parts = split_path(dotted)
    current = obj
    for part in parts[:-1]:
        child = current.get(part)
        if not isinstance(child, dict):
            child = {}
            current[part] = child
        current = child
    current[parts[-1]] = value
