"""LIST (selectors, limit/continue paging, resourceVersion semantics) and the
opening of WATCH streams (initial state or history replay, selector
enter/leave translation). The streaming itself lives in ``watch_stream``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ApiError, bad_request, expired
from .json_types import JsonObject
from .presentation import present
from .resources import ResourceType
from .selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector
from .store import ObjectStore, StoreEvent, Subscription, object_key

_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def _parse_version(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise bad_request(f'invalid resource version "{text}"') from error
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value


def _encode_continue(version: int, last_key: tuple[str, str]) -> str:
    payload = json.dumps({"v": "meta.k8s.io/v1", "rv": version, "start": list(last_key)})
    return base64.urlsafe_b64encode(payload.encode()).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(payload["rv"]), (str(payload["start"][0]), str(payload["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error) as error:
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion "
            "(version meta.k8s.io/v1)"
        ) from error


@dataclass(frozen=True)
class ObjectFilter:
    """Namespace + label + field selection of one list or watch request."""

    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector

    @classmethod
    def from_params(
        cls, resource_type: ResourceType, namespace: str | None, *, params: Mapping[str, str]
    ) -> ObjectFilter:
        return cls(
            namespace=namespace,
            labels=parse_label_selector(params.get("labelSelector")),
            fields=parse_field_selector(params.get("fieldSelector"), resource_type.field_labels),
        )

    def matches(self, obj: JsonObject) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)


def list_objects(
    store: ObjectStore,
    resource_type: ResourceType,
    *,
    namespace: str | None,
    params: Mapping[str, str],
) -> JsonObject:
    """A ``<Kind>List`` body, paged by ``limit``/``continue``."""
    selection = ObjectFilter.from_params(resource_type, namespace=namespace, params=params)
    try:
        limit = int(params.get("limit") or 0)
    except ValueError as error:
        raise bad_request("limit must be an integer") from error
    token = params.get("continue") or ""
    start_after: tuple[str, str] | None = None
    storage = resource_type.storage
    more, remaining = False, 0
    with store.lock:
        if params.get("resourceVersionMatch") == "Exact" and not token:
            list_version = _parse_version(params.get("resourceVersion") or "")
            page = [
                item
                for item in store.snapshot_at(storage, namespace, version=list_version)
                if selection.matches(item)
            ]
            if 0 < limit < len(page):
                more, remaining, page = True, len(page) - limit, page[:limit]
        else:
            list_version = store.current_resource_version()
            if token:
                list_version, start_after = _decode_continue(token)
                if list_version < store.compacted_before(storage):
                    raise expired(_CONTINUE_EXPIRED)
            page, more, remaining = store.page(
                storage,
                namespace,
                start_after=start_after,
                limit=limit if limit > 0 else -1,
                accept=selection.matches,
            )
    list_meta: JsonObject = {"resourceVersion": str(list_version)}
    if more and page:
        list_meta["continue"] = _encode_continue(list_version, object_key(page[-1]))
        if selection.labels.empty and selection.fields.empty:
            # Like etcd3 paging: the count is only known without selectors.
            list_meta["remainingItemCount"] = remaining
    return {
        "kind": f"{resource_type.kind}List",
        "apiVersion": resource_type.api_version,
        "metadata": list_meta,
        "items": [present(resource_type, item) for item in page],
    }


class WatchTranslator:
    """Turns store events into what one watcher sees: an object entering its
    selection is ADDED, one leaving it is DELETED (with its last matching state)."""

    def __init__(self, resource_type: ResourceType, selection: ObjectFilter) -> None:
        self.resource_type = resource_type
        self.selection = selection

    def translate(self, event: StoreEvent) -> tuple[str, JsonObject] | None:
        matches_now = self.selection.matches(event.obj)
        matched_before = event.previous is not None and self.selection.matches(event.previous)
        if event.type in ("ADDED", "DELETED"):
            return (event.type, present(self.resource_type, event.obj)) if matches_now else None
        if matches_now and matched_before:
            return "MODIFIED", present(self.resource_type, event.obj)
        if matches_now:
            return "ADDED", present(self.resource_type, event.obj)
        if matched_before and event.previous is not None:
            last_seen = dict(event.previous)
            last_seen["metadata"] = dict(event.previous.get("metadata") or {})
            last_seen["metadata"]["resourceVersion"] = str(event.resource_version)
            return "DELETED", present(self.resource_type, last_seen)
        return None


@dataclass
class OpenedWatch:
    subscription: Subscription
    backlog: list[tuple[str, JsonObject]]
    translator: WatchTranslator


def open_watch(
    store: ObjectStore,
    resource_type: ResourceType,
    *,
    namespace: str | None,
    params: Mapping[str, str],
) -> OpenedWatch:
    """Subscribe and compute the backlog atomically; 410 Expired for compacted versions."""
    selection = ObjectFilter.from_params(resource_type, namespace=namespace, params=params)
    translator = WatchTranslator(resource_type, selection)
    requested = params.get("resourceVersion") or ""
    storage = resource_type.storage

    def backlog_events() -> list[StoreEvent]:
        if requested in ("", "0"):
            items, version = store.items(storage, namespace)
            return [StoreEvent("ADDED", storage, item, None, version) for item in items]
        return store.events_since(storage, _parse_version(requested))

    subscription, replay = store.subscribe(storage, prepare=backlog_events)
    backlog = [out for out in map(translator.translate, replay) if out is not None]
    return OpenedWatch(subscription, backlog, translator)


def expired_watch_event(error: ApiError) -> JsonObject:
    return {"type": "ERROR", "object": error.status_body()}
