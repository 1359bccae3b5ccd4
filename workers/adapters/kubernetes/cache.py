"""The list-and-watch cache: one informer thread per resource kind.

Each ``Informer`` does what client-go's reflector does: one LIST (paged) at
start, then WATCH from the list's ``resourceVersion``; a watch that ends is
resumed from the last version seen (no LIST); a 410 Gone (the version is too
old) forces a re-LIST; a broken connection is retried with exponential
backoff. Readers take snapshots of the store and never call the API server,
so a steady-state autoscale round makes no LIST calls. A ``StoreListener``
(client-go's event handler) is told of every change to the store, in the
store's order, so an index over it (``cluster_index``) stays up to date
without rescanning it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from workers.adapters.kubernetes.client import (
    JsonObject,
    KubeApiError,
    KubeClient,
    KubeConnectionError,
    WatchStream,
)
from workers.adapters.kubernetes.cluster_index import ClusterIndex
from workers.adapters.kubernetes.kinds import ResourceKind

log = logging.getLogger(__name__)

LIST_PAGE_SIZE = 500
# Field selector for pods that still hold resources (kube-scheduler's view).
NON_TERMINATED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class CacheNotSyncedError(RuntimeError):
    """The cache has not finished its first LIST within the allowed time."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff between reconnects: ``initial * 2**n``, capped."""

    initial: float = 0.2
    maximum: float = 30.0

    def delay(self, failures: int) -> float:
        return float(min(self.maximum, self.initial * 2 ** max(0, failures - 1)))


@dataclass(frozen=True)
class InformerStats:
    lists: int
    watches: int
    gone: int
    errors: int


def object_key(obj: JsonObject) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class StoreListener(Protocol):
    """Told of each change to an informer's store, under the informer's lock."""

    def put(self, key: str, obj: JsonObject) -> None: ...

    def removed(self, key: str) -> None: ...

    def replaced(self, items: Mapping[str, JsonObject]) -> None: ...


class Informer:
    """Keeps every object of one kind (optionally filtered) in memory, up to date."""

    def __init__(
        self,
        client: KubeClient,
        kind: ResourceKind,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        watch_timeout_seconds: int = 300,
        bookmarks: bool = True,
        backoff: Backoff = Backoff(),
        wait: Callable[[threading.Event, float], bool] | None = None,
        listener: StoreListener | None = None,
    ) -> None:
        self.kind = kind
        self._listener = listener
        self._client = client
        self._path = kind.collection_path(namespace)
        self._selectors: dict[str, str | int | bool] = {}
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        self._watch_timeout = watch_timeout_seconds
        self._bookmarks = bookmarks
        self._backoff = backoff
        # Injected so tests can run backoff without real sleeps; default waits on the stop event.
        self._wait = wait or (lambda event, seconds: event.wait(seconds))
        self._store: dict[str, JsonObject] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: WatchStream | None = None
        self._resource_version = ""
        self._lists = 0
        self._watches = 0
        self._gone = 0
        self._errors = 0

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"informer-{self.kind.plural}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    # --- reads -------------------------------------------------------------

    def list(self) -> list[JsonObject]:
        """A snapshot of the objects (shared dicts: treat them as read-only)."""
        with self._lock:
            return list(self._store.values())

    def get(self, namespace: str | None, name: str) -> JsonObject | None:
        key = f"{namespace}/{name}" if namespace and self.kind.namespaced else name
        with self._lock:
            return self._store.get(key)

    def stats(self) -> InformerStats:
        with self._lock:
            return InformerStats(self._lists, self._watches, self._gone, self._errors)

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    # --- the reflector loop --------------------------------------------------

    def _run(self) -> None:
        failures = 0
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch_once()
                failures = 0
            except KubeApiError as error:
                if error.status == 410:
                    # The version we hold is compacted away: start over from a fresh LIST.
                    log.info("%s: watch version too old, re-listing", self.kind.plural)
                    with self._lock:
                        self._gone += 1
                    need_list = True
                    continue
                failures += 1
                self._note_error(error, failures)
            except KubeConnectionError as error:
                failures += 1
                self._note_error(error, failures)
            except Exception as error:  # keep the informer alive whatever the server sends
                failures += 1
                need_list = True
                self._note_error(error, failures)
            if failures and not self._stop.is_set():
                self._wait(self._stop, self._backoff.delay(failures))

    def _note_error(self, error: Exception, failures: int) -> None:
        with self._lock:
            self._errors += 1
        if not self._stop.is_set():
            log.warning("%s informer: %s (failure %d)", self.kind.plural, error, failures)

    def _list(self) -> None:
        items: dict[str, JsonObject] = {}
        query: dict[str, str | int | bool] = dict(self._selectors)
        query["limit"] = LIST_PAGE_SIZE
        while True:
            page = self._client.request("GET", self._path, query=query)
            for item in page.get("items") or []:
                items[object_key(item)] = item
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                break
            query["continue"] = token
        with self._lock:
            self._store = items
            self._resource_version = version
            self._lists += 1
            if self._listener is not None:
                self._listener.replaced(items)
        self._synced.set()

    def _watch_once(self) -> None:
        query: dict[str, str | int | bool] = dict(self._selectors)
        query["resourceVersion"] = self.resource_version
        if self._bookmarks:
            query["allowWatchBookmarks"] = True
        stream = self._client.watch(self._path, query=query, timeout_seconds=self._watch_timeout)
        with self._lock:
            self._stream = stream
            self._watches += 1
        try:
            if self._stop.is_set():
                return
            self._apply_events(stream.events())
        finally:
            with self._lock:
                self._stream = None
            stream.close()

    def _apply_events(self, events: Iterable[JsonObject]) -> None:
        for event in events:
            if self._stop.is_set():
                return
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 500)
                raise KubeApiError(code, reason=str(obj.get("reason") or ""), body=obj)
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            with self._lock:
                if kind in ("ADDED", "MODIFIED"):
                    key = object_key(obj)
                    self._store[key] = obj
                    if self._listener is not None:
                        self._listener.put(key, obj)
                elif kind == "DELETED":
                    key = object_key(obj)
                    if self._store.pop(key, None) is not None and self._listener is not None:
                        self._listener.removed(key)
                if version:
                    self._resource_version = version


class ScopedInformer:
    """One kind watched in each of several namespaces, read as one informer.

    ``TRAINSCALER_NAMESPACES`` with more than one namespace: one namespaced
    watch each (so namespaced Roles suffice), never a cluster-wide one.
    """

    def __init__(self, kind: ResourceKind, informers: Iterable[Informer]) -> None:
        self.kind = kind
        self._parts = list(informers)

    def start(self) -> None:
        for part in self._parts:
            part.start()

    def stop(self, timeout: float = 5.0) -> None:
        for part in self._parts:
            part.stop(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return all(part.wait_synced(timeout) for part in self._parts)

    @property
    def synced(self) -> bool:
        return all(part.synced for part in self._parts)

    def list(self) -> list[JsonObject]:
        return [obj for part in self._parts for obj in part.list()]

    def get(self, namespace: str | None, name: str) -> JsonObject | None:
        for part in self._parts:
            found = part.get(namespace, name)
            if found is not None:
                return found
        return None

    def stats(self) -> InformerStats:
        parts = [part.stats() for part in self._parts]
        return InformerStats(
            sum(p.lists for p in parts),
            sum(p.watches for p in parts),
            sum(p.gone for p in parts),
            sum(p.errors for p in parts),
        )


Watched = Informer | ScopedInformer


class ClusterCache:
    """The informers one process shares: started together, read by snapshot.

    ``index`` is fed by the node and pod informers' listeners (``build_cache``).
    """

    def __init__(self, informers: Iterable[Watched], *, index: ClusterIndex) -> None:
        self.index = index
        self._informers = {informer.kind.plural: informer for informer in informers}
        self._started = False
        self._lock = threading.Lock()

    @property
    def informers(self) -> MappingProxyType[str, Watched]:
        return MappingProxyType(self._informers)

    def informer(self, kind: ResourceKind) -> Watched:
        return self._informers[kind.plural]

    def has(self, kind: ResourceKind) -> bool:
        informer = self._informers.get(kind.plural)
        return informer is not None and informer.kind == kind

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for informer in self._informers.values():
            informer.start()

    def ensure_synced(self, timeout: float) -> None:
        """Start (once) and wait for every first LIST; raise when one is late."""
        self.start()
        for plural, informer in self._informers.items():
            if not informer.wait_synced(timeout):
                raise CacheNotSyncedError(f"{plural} cache not synced after {timeout:.0f}s")

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()

    def stats(self) -> dict[str, InformerStats]:
        return {plural: informer.stats() for plural, informer in self._informers.items()}
