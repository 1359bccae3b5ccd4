"""Base class of the workload controllers: dirty-key tracking from store events.

A controller owns one kind (``storage``); an event on that kind marks the
object dirty, and an event on a child kind marks the child's controlling owner
dirty. ``reconcile`` then syncs each dirty object that still exists.
"""

from __future__ import annotations

from ..json_types import JsonObject
from ..operations import ApiOperations
from ..resources import ObjectRef, ResourceType
from ..store import StoreEvent, object_key
from .common import controller_of

PODS = "pods"


class WorkloadController:
    group: str = "apps"
    plural: str = ""
    child_storage: str = PODS

    def __init__(self, operations: ApiOperations) -> None:
        self.operations = operations
        self.store = operations.store
        self.resource_type: ResourceType = operations.resource(self.group, "v1", plural=self.plural)
        self.pods: ResourceType = operations.resource("", "v1", plural="pods")
        self._dirty: dict[tuple[str, str], None] = {}

    def observe(self, event: StoreEvent) -> None:
        if event.storage == self.resource_type.storage:
            self._dirty[object_key(event.obj)] = None
        elif event.storage == self.child_storage:
            owner = controller_of(event.obj)
            if owner is not None and owner.get("kind") == self.resource_type.kind:
                self._dirty[(object_key(event.obj)[0], str(owner.get("name")))] = None

    def reconcile(self) -> None:
        dirty, self._dirty = self._dirty, {}
        for namespace, name in dirty:
            obj = self.store.get(self.resource_type.storage, (namespace, name))
            if obj is not None and not (obj.get("metadata") or {}).get("deletionTimestamp"):
                self.sync(obj)

    def sync(self, obj: JsonObject) -> None:
        raise NotImplementedError

    def owned(self, owner: JsonObject, storage: str) -> list[JsonObject]:
        """Children in ``storage`` whose controlling owner is ``owner`` (by uid)."""
        uid = owner["metadata"]["uid"]
        children = []
        for key in self.store.dependents(uid):
            if key[0] != storage:
                continue
            child = self.store.get(*key)
            reference = controller_of(child) if child is not None else None
            if child is not None and reference is not None and reference.get("uid") == uid:
                children.append(child)
        return children

    def write_status(self, obj: JsonObject, status: JsonObject) -> None:
        meta = obj["metadata"]

        def replace_status(target: JsonObject) -> None:
            target["status"] = status

        self.operations.mutate(
            ObjectRef(self.resource_type, meta.get("namespace", ""), meta["name"]), replace_status
        )

    def delete_pod(self, pod: JsonObject) -> None:
        meta = pod["metadata"]
        if self.store.get(PODS, (meta.get("namespace", ""), meta["name"])) is not None:
            self.operations.delete_stored(
                PODS, (meta.get("namespace", ""), meta["name"]), policy="Background"
            )

    def create_pod(self, namespace: str, pod: JsonObject) -> JsonObject:
        return self.operations.create_stored(self.pods, pod, namespace=namespace)
