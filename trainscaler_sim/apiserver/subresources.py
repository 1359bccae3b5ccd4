"""The ``autoscaling/v1`` /scale subresource (apps kinds and CRDs declaring
scale paths) and pods/binding, on top of ``ApiOperations``."""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request, conflict, invalid, status_success
from .json_types import JsonObject, get_path, metadata, set_path
from .operations import ApiOperations, spec_part
from .resources import ObjectRef, ResourceType, ScalePaths
from .selectors import selector_to_string
from .store import ObjectKey


def _scale_paths(resource_type: ResourceType) -> ScalePaths:
    if resource_type.scale is None:
        raise ApiError(404, "the server could not find the requested resource")
    return resource_type.scale


def scale_of(resource_type: ResourceType, obj: JsonObject) -> JsonObject:
    """The Scale view of an object: spec/status replicas and the selector string."""
    paths = _scale_paths(resource_type)
    meta = obj.get("metadata") or {}
    if paths.label_selector is None:
        selector: Any = selector_to_string((obj.get("spec") or {}).get("selector"))
    else:
        selector = get_path(obj, paths.label_selector)
    status: JsonObject = {"replicas": int(get_path(obj, paths.status_replicas) or 0)}
    # autoscaling/v1 ScaleSpec.replicas is omitempty: a Scale at 0 has an empty spec.
    replicas = int(get_path(obj, paths.spec_replicas) or 0)
    spec: JsonObject = {"replicas": replicas} if replicas else {}
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": spec,
        "status": status,
    }


class Subresources:
    """Scale reads/writes (409 on a stale Scale resourceVersion) and binding."""

    def __init__(self, operations: ApiOperations) -> None:
        self.operations = operations
        self.store = operations.store

    def get_scale(self, ref: ObjectRef) -> JsonObject:
        return scale_of(ref.resource_type, self.operations.get_stored(ref))

    def _write_scale(
        self, resource_type: ResourceType, current: JsonObject, *, scale: Any
    ) -> JsonObject:
        name = current["metadata"]["name"]
        if not isinstance(scale, dict):
            raise bad_request("the body of the request was in an unknown format")
        sent_version = (scale.get("metadata") or {}).get("resourceVersion")
        if sent_version and str(sent_version) != current["metadata"]["resourceVersion"]:
            raise conflict(resource_type.group_resource, name)
        # Absent means 0, as it decodes into ScaleSpec (and as a Scale at 0 reads).
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                name,
                cause=f"spec.replicas: Invalid value: {replicas!r}: must be greater than or equal to 0",
            )
        updated = copy.deepcopy(current)
        set_path(updated, _scale_paths(resource_type).spec_replicas, value=replicas)
        if spec_part(updated) != spec_part(current):
            metadata(updated)["generation"] = int(current["metadata"].get("generation", 1)) + 1
        return scale_of(
            resource_type, self.operations.commit_update(resource_type, current, updated=updated)
        )

    def update_scale(self, ref: ObjectRef, body: Any) -> JsonObject:
        with self.store.lock:
            current = self.operations.get_stored(ref)
            return self._write_scale(ref.resource_type, current, scale=body)

    def patch_scale(self, ref: ObjectRef, raw: bytes, *, content_type: str) -> JsonObject:
        resource_type = ref.resource_type
        with self.store.lock:
            current = self.operations.get_stored(ref)
            scale = scale_of(resource_type, current)
            patched = self.operations.apply_patch(
                None, copy.deepcopy(scale), raw=raw, content_type=content_type
            )
            return self._write_scale(resource_type, current, scale=patched)

    def bind(self, key: ObjectKey, body: Any) -> JsonObject:
        """POST pods/<name>/binding: assign a node (409 if already assigned)."""
        pods = self.operations.resource("", "v1", plural="pods")
        namespace, name = key
        target = body.get("target") if isinstance(body, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise invalid("Binding", name, cause="target.name: Required value")
        with self.store.lock:
            current = self.operations.get_stored(ObjectRef(pods, namespace, name))
            assigned = (current.get("spec") or {}).get("nodeName")
            if assigned:
                raise ApiError(409, f'pod {name} is already assigned to node "{assigned}"')
            updated = copy.deepcopy(current)
            updated["spec"]["nodeName"] = node
            self.store.commit(pods.storage, updated, event_type="MODIFIED")
        return status_success("pods", name, uid=str(current["metadata"].get("uid", "")))
