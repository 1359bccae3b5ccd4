"""How stored objects look through a given endpoint, and how bodies are stored.

Stored objects carry the kind/apiVersion of their storage form; events served
through events.k8s.io/v1 are converted, and a CRD's other served versions only
relabel ``apiVersion`` (no conversion webhooks here).
"""

from __future__ import annotations

from .event_conversion import from_events_v1, to_events_v1
from .json_types import JsonObject
from .resources import ResourceType

_EVENTS_GROUP = "events.k8s.io"


def present(resource_type: ResourceType, obj: JsonObject) -> JsonObject:
    """The stored object as this endpoint serves it (may share structure with ``obj``)."""
    if resource_type.group == _EVENTS_GROUP:
        return to_events_v1(obj)
    if obj.get("apiVersion") != resource_type.api_version or obj.get("kind") != resource_type.kind:
        relabelled = dict(obj)
        relabelled["apiVersion"] = resource_type.api_version
        relabelled["kind"] = resource_type.kind
        return relabelled
    return obj


def accept(resource_type: ResourceType, body: JsonObject) -> JsonObject:
    """A request body in its storage form (``body`` is consumed)."""
    if resource_type.group == _EVENTS_GROUP:
        return from_events_v1(body)
    body["apiVersion"] = resource_type.api_version
    body["kind"] = resource_type.kind
    return body
