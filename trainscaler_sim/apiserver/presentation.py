"""How stored objects look through a given endpoint, and how bodies are stored.

Stored objects carry the kind/apiVersion of their storage form; events served
through events.k8s.io/v1 are converted, and a CRD's other served versions only
relabel ``apiVersion`` (no conversion webhooks here).
"""

from __future__ import annotations

import json
import re

from .errors import ApiError, bad_request
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
    check_micro_times(resource_type, body)
    drop_empty_metadata_maps(body)
    if resource_type.group == _EVENTS_GROUP:
        return from_events_v1(body)
    check_type_meta(resource_type, body)
    body["apiVersion"] = resource_type.api_version
    body["kind"] = resource_type.kind
    return body


def check_type_meta(resource_type: ResourceType, body: JsonObject) -> None:
    """kind and apiVersion as kube-apiserver's decoders check them.

    Built-in kinds may leave both out (the endpoint defaults them) but not name
    others. A custom resource must name both: its decoder is unstructured.
    """
    kind, api_version = body.get("kind"), body.get("apiVersion")
    expected_kind, expected_version = resource_type.kind, resource_type.api_version
    if resource_type.custom:
        if not kind:
            raise bad_request(
                f"the object provided is unrecognized (must be of type {expected_kind}): "
                f"Object 'Kind' is missing in '{json.dumps(body, separators=(',', ':'))}'"
            )
        if api_version != expected_version:
            raise bad_request(
                f"the API version in the data ({api_version or ''}) does not match the "
                f"expected API version ({expected_version})"
            )
        if kind != expected_kind:
            name = str((body.get("metadata") or {}).get("name", ""))
            raise ApiError(
                422,
                f'{kind}.{resource_type.group} "{name}" is invalid: kind: Invalid value: '
                f'"{kind}": must be {expected_kind}',
                details={"name": name, "group": resource_type.group, "kind": kind},
            )
        return
    if api_version and api_version != expected_version:
        raise bad_request(
            f'{kind or expected_kind} in version "{resource_type.version}" cannot be handled as '
            f'a {expected_kind}: no kind "{kind or expected_kind}" is registered for version '
            f'"{api_version}"'
        )
    if kind and kind != expected_kind:
        raise bad_request(
            f'{kind} in version "{resource_type.version}" cannot be handled as a '
            f"{expected_kind}: converting ({resource_type.version}.{kind}) to "
            f"(core.{expected_kind}): unknown conversion"
        )


# metav1.MicroTime decodes with RFC3339Micro only: six fractional digits, always.
_RFC3339_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_MICRO_TIME_FIELDS = {
    "Event": (("eventTime",), ("series", "lastObservedTime")),
    "Lease": (("spec", "acquireTime"), ("spec", "renewTime")),
}


def check_micro_times(resource_type: ResourceType, body: JsonObject) -> None:
    """400 for a MicroTime field not in RFC3339Micro (``2006-01-02T15:04:05.000000Z07:00``)."""
    for path in _MICRO_TIME_FIELDS.get(resource_type.kind, ()):
        value: object = body
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None or (isinstance(value, str) and _RFC3339_MICRO.match(value)):
            continue
        raise bad_request(
            f'{resource_type.kind} in version "{resource_type.version}" cannot be handled as a '
            f'{resource_type.kind}: parsing time "{value}" as '
            '"2006-01-02T15:04:05.000000Z07:00": cannot parse it as RFC3339Micro'
        )


def drop_empty_metadata_maps(body: JsonObject) -> None:
    """ObjectMeta's maps are omitempty: ``labels: {}`` is stored (and served) as absent."""
    meta = body.get("metadata")
    if isinstance(meta, dict):
        for field in ("labels", "annotations"):
            if meta.get(field) == {}:
                del meta[field]
