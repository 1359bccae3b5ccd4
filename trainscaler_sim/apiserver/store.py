"""The object store: per-storage dicts indexed by namespace and name, one global
resourceVersion counter, a bounded per-storage event history, and fan-out of
change events to subscriber queues (watches and the controller manager).

Stored objects are never mutated after commit: writers hand over fresh dicts,
so readers may serialise a stored object without copying it under the lock.
"""

from __future__ import annotations

import bisect
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import expired
from .json_types import JsonObject, metadata

# Resource versions below this were "compacted" before the server started, so a
# watch from an ancient version such as "1" gets 410 Gone, as on a real cluster.
INITIAL_RESOURCE_VERSION = 100
ObjectKey = tuple[str, str]


@dataclass(frozen=True)
class StoreEvent:
    """One committed change; ``previous`` is the object before MODIFIED/DELETED."""

    type: str
    storage: str
    obj: JsonObject
    previous: JsonObject | None
    resource_version: int

    @property
    def namespace(self) -> str:
        return str(self.obj.get("metadata", {}).get("namespace", ""))


@dataclass(eq=False)
class Subscription:
    """A queue of StoreEvents for one storage (or all storages when ``storage`` is None)."""

    storage: str | None
    events: queue.SimpleQueue[StoreEvent] = field(default_factory=queue.SimpleQueue)


def object_key(obj: JsonObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _owner_uids(obj: JsonObject | None) -> set[str]:
    if obj is None:
        return set()
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(reference.get("uid")) for reference in references if reference.get("uid")}


class ObjectStore:
    """Thread-safe storage with watch history; all operations are O(1) or O(listed)."""

    def __init__(self, *, history_limit: int = 10000) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[str, dict[str, JsonObject]]] = {}
        self._created_order: dict[tuple[str, str, str], int] = {}
        self._resource_version = INITIAL_RESOURCE_VERSION
        self._history_limit = history_limit
        self._history: dict[str, deque[StoreEvent]] = {}
        self._compacted: dict[str, int] = {}
        self._subscribers: dict[str | None, list[Subscription]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self._sorted_keys: dict[str, list[ObjectKey]] = {}

    @property
    def lock(self) -> threading.RLock:
        """Held across read-check-write sequences by the API operations."""
        return self._lock

    def current_resource_version(self) -> int:
        with self._lock:
            return self._resource_version

    def compacted_before(self, storage: str) -> int:
        """Versions older than this are gone from ``storage``'s history."""
        with self._lock:
            return self._compacted.get(storage, INITIAL_RESOURCE_VERSION)

    def get(self, storage: str, key: ObjectKey) -> JsonObject | None:
        with self._lock:
            return self._objects.get(storage, {}).get(key[0], {}).get(key[1])

    def creation_order(self, storage: str, key: ObjectKey) -> int:
        with self._lock:
            return self._created_order.get((storage, *key), 0)

    def _key_range(self, storage: str, namespace: str | None) -> tuple[list[ObjectKey], int, int]:
        keys = self._sorted_keys.get(storage, [])
        if namespace is None:
            return keys, 0, len(keys)
        # "\x00" sorts after the namespace itself and before any longer namespace name.
        low = bisect.bisect_left(keys, (namespace, ""))
        high = bisect.bisect_left(keys, (namespace + "\x00", ""))
        return keys, low, high

    def items(self, storage: str, namespace: str | None) -> tuple[list[JsonObject], int]:
        """Objects sorted by (namespace, name), and the version they were read at."""
        with self._lock:
            keys, low, high = self._key_range(storage, namespace)
            by_namespace = self._objects.get(storage, {})
            items = [by_namespace[ns][name] for ns, name in keys[low:high]]
            return items, self._resource_version

    def page(
        self,
        storage: str,
        namespace: str | None,
        *,
        start_after: ObjectKey | None,
        limit: int,
        accept: Callable[[JsonObject], bool],
    ) -> tuple[list[JsonObject], bool, int]:
        """Up to ``limit`` accepted objects after ``start_after`` in key order.

        Returns (items, more_may_follow, keys_left_after_the_page); the scan
        stops as soon as the page is full, so a page costs O(limit) without
        selectors rather than O(objects).
        """
        with self._lock:
            keys, low, high = self._key_range(storage, namespace)
            if start_after is not None:
                low = max(low, bisect.bisect_right(keys, start_after))
            by_namespace = self._objects.get(storage, {})
            found: list[JsonObject] = []
            index = low
            while index < high:
                ns, name = keys[index]
                index += 1
                obj = by_namespace[ns][name]
                if accept(obj):
                    found.append(obj)
                    if len(found) == limit:
                        break
            return found, index < high, high - index

    def count(self, storage: str) -> int:
        with self._lock:
            return sum(len(names) for names in self._objects.get(storage, {}).values())

    def dependents(self, owner_uid: str) -> list[tuple[str, ObjectKey]]:
        """(storage, (namespace, name)) of objects whose ownerReferences name ``owner_uid``."""
        with self._lock:
            return [(s, (ns, n)) for s, ns, n in sorted(self._dependents.get(owner_uid, ()))]

    def commit(self, storage: str, obj: JsonObject, *, event_type: str) -> JsonObject:
        """Store ``obj`` (which the store now owns) as ADDED/MODIFIED/DELETED.

        Assigns the next resourceVersion, appends to history and notifies
        subscribers; returns the committed object.
        """
        with self._lock:
            namespace, name = object_key(obj)
            names = self._objects.setdefault(storage, {}).setdefault(namespace, {})
            previous = names.get(name)
            self._resource_version += 1
            version = self._resource_version
            metadata(obj)["resourceVersion"] = str(version)
            key = (storage, namespace, name)
            sorted_keys = self._sorted_keys.setdefault(storage, [])
            if event_type == "DELETED":
                if names.pop(name, None) is not None:
                    position = bisect.bisect_left(sorted_keys, (namespace, name))
                    del sorted_keys[position]
                if not names:
                    del self._objects[storage][namespace]
                self._created_order.pop(key, None)
                self._reindex_owners(key, previous=previous, current=None)
            else:
                names[name] = obj
                if previous is None:
                    self._created_order[key] = version
                    bisect.insort(sorted_keys, (namespace, name))
                self._reindex_owners(key, previous=previous, current=obj)
            event: StoreEvent = StoreEvent(event_type, storage, obj, previous, version)
            self._record(event)
            return obj

    def _reindex_owners(
        self,
        key: tuple[str, str, str],
        *,
        previous: JsonObject | None,
        current: JsonObject | None,
    ) -> None:
        old, new = _owner_uids(previous), _owner_uids(current)
        for uid in old - new:
            holders = self._dependents.get(uid)
            if holders is not None:
                holders.discard(key)
                if not holders:
                    del self._dependents[uid]
        for uid in new - old:
            self._dependents.setdefault(uid, set()).add(key)

    def _record(self, event: StoreEvent) -> None:
        history = self._history.setdefault(event.storage, deque())
        history.append(event)
        while len(history) > self._history_limit:
            evicted = history.popleft()
            self._compacted[event.storage] = evicted.resource_version
        for subscription in self._subscribers.get(event.storage, ()):
            subscription.events.put(event)
        for subscription in self._subscribers.get(None, ()):
            subscription.events.put(event)

    def compact(self, storage: str | None = None) -> None:
        """Forget all history (of one storage or all): older versions now answer 410."""
        with self._lock:
            targets = [storage] if storage is not None else list(self._history)
            for target in targets:
                self._history[target] = deque()
                self._compacted[target] = self._resource_version

    def events_since(self, storage: str, version: int) -> list[StoreEvent]:
        """History after ``version``; 410 Expired when it has been compacted away."""
        with self._lock:
            floor = self._compacted.get(storage, INITIAL_RESOURCE_VERSION)
            if version < floor:
                raise expired(f"too old resource version: {version} ({floor})")
            return [e for e in self._history.get(storage, ()) if e.resource_version > version]

    def subscribe(
        self,
        storage: str | None,
        *,
        prepare: Callable[[], list[StoreEvent]] | None = None,
    ) -> tuple[Subscription, list[StoreEvent]]:
        """Register a subscriber; ``prepare`` runs atomically with registration so
        the replayed events and the live ones neither overlap nor leave a gap."""
        with self._lock:
            replay = prepare() if prepare is not None else []
            subscription = Subscription(storage)
            self._subscribers.setdefault(storage, []).append(subscription)
            return subscription, replay

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            subscribers = self._subscribers.get(subscription.storage, [])
            if subscription in subscribers:
                subscribers.remove(subscription)

    def snapshot_at(self, storage: str, namespace: str | None, *, version: int) -> list[JsonObject]:
        """The objects as of ``version``, rebuilt by undoing later history (410 if compacted)."""
        with self._lock:
            later = self.events_since(storage, version)
            current, _ = self.items(storage, namespace)
            state = {object_key(obj): obj for obj in current}
            for event in reversed(later):
                key = object_key(event.obj)
                if namespace is not None and key[0] != namespace:
                    continue
                if event.type == "ADDED":
                    state.pop(key, None)
                elif event.previous is not None:
                    state[key] = event.previous
            return [state[key] for key in sorted(state)]
