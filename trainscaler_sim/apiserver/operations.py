"""The apiserver's write semantics: create, update, patch, status and scale
subresources, delete with garbage collection, and the in-process helpers the
simulated controllers use. HTTP parsing lives in ``handler``; reads in ``reads``.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from .admission import FieldValidation, SchemaAdmission
from .defaults import apply_defaults, initial_status, validate, validate_name
from .errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    status_success,
)
from .json_types import Clock, JsonObject, metadata, rfc3339
from .openapi import OpenApiPublisher
from .patching import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from .presentation import accept, present
from .resources import ObjectRef, ResourceRegistry, ResourceType, types_from_crd
from .store import ObjectKey, ObjectStore

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Server-owned metadata a client cannot change through update or patch.
_SERVER_OWNED_METADATA = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
# Kinds whose DELETE answers with the object rather than a Status.
_RETURNS_DELETED_OBJECT = frozenset({"Pod", "Namespace", "Service", "CustomResourceDefinition"})
_CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"
_NAMESPACES = "namespaces"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def spec_part(obj: JsonObject) -> JsonObject:
    """Everything but metadata and status: changes here bump metadata.generation."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _same_ignoring_version(left: JsonObject, right: JsonObject) -> bool:
    left_meta = dict(left.get("metadata") or {})
    right_meta = dict(right.get("metadata") or {})
    left_meta.pop("resourceVersion", None)
    right_meta.pop("resourceVersion", None)
    return left_meta == right_meta and {k: v for k, v in left.items() if k != "metadata"} == {
        k: v for k, v in right.items() if k != "metadata"
    }


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_request(f"couldn't get version/kind; json parse error: {error}") from error


class ApiOperations:
    """Write paths of the API, shared by the HTTP handler and the controllers."""

    def __init__(
        self, store: ObjectStore, registry: ResourceRegistry, *, clock: Clock, seed: int = 0
    ) -> None:
        self.store = store
        self.registry = registry
        self._clock = clock
        self._random = random.Random(seed)
        self.openapi = OpenApiPublisher()
        self.admission = SchemaAdmission(store, self.openapi)

    def now(self) -> str:
        return rfc3339(self._clock())

    def resource(self, group: str, version: str, *, plural: str) -> ResourceType:
        return self.registry.lookup(group, version, plural=plural)

    # ----------------------------------------------------------------- reads
    def get_stored(self, ref: ObjectRef) -> JsonObject:
        found = self.store.get(ref.resource_type.storage, ref.key)
        if found is None:
            raise not_found(ref.resource_type.group_resource, ref.name)
        return found

    def get(self, ref: ObjectRef) -> JsonObject:
        return present(ref.resource_type, self.get_stored(ref))

    # ---------------------------------------------------------------- create
    def _check_namespace(self, resource_type: ResourceType, namespace: str) -> None:
        if resource_type.namespaced and self.store.get(_NAMESPACES, ("", namespace)) is None:
            raise not_found("namespaces", namespace)

    def _generate_name(self, resource_type: ResourceType, namespace: str, *, prefix: str) -> str:
        for _ in range(100):
            suffix = "".join(self._random.choice(_NAME_ALPHABET) for _ in range(5))
            candidate = f"{prefix}{suffix}"
            if self.store.get(resource_type.storage, (namespace, candidate)) is None:
                return candidate
        raise ApiError(500, f"could not generate a unique name from {prefix!r}")

    def create(
        self,
        resource_type: ResourceType,
        body: Any,
        *,
        namespace: str,
        fields: FieldValidation | None = None,
    ) -> JsonObject:
        """POST: defaults, validation, server metadata; 409 AlreadyExists on duplicates."""
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        return present(
            resource_type,
            self.create_stored(resource_type, body, namespace=namespace, fields=fields),
        )

    def create_stored(
        self,
        resource_type: ResourceType,
        body: JsonObject,
        *,
        namespace: str,
        fields: FieldValidation | None = None,
    ) -> JsonObject:
        obj = accept(resource_type, body)
        meta = metadata(obj)
        if resource_type.namespaced:
            sent = meta.get("namespace")
            if sent and sent != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        with self.store.lock:
            self._check_namespace(resource_type, namespace)
            name = meta.get("name")
            if not name and meta.get("generateName"):
                name = self._generate_name(
                    resource_type, namespace, prefix=str(meta["generateName"])
                )
            validate_name(resource_type, str(name or ""))
            meta["name"] = name
            if self.store.get(resource_type.storage, (namespace, str(name))) is not None:
                raise already_exists(resource_type.group_resource, str(name))
            for transient in ("resourceVersion", "deletionTimestamp", "managedFields", "selfLink"):
                meta.pop(transient, None)
            meta["uid"] = str(uuid.UUID(int=self._random.getrandbits(128), version=4))
            meta["creationTimestamp"] = self.now()
            meta["generation"] = 1
            apply_defaults(resource_type, obj)
            if resource_type.has_status:
                status = initial_status(resource_type, obj)
                if status is None:
                    obj.pop("status", None)
                else:
                    obj["status"] = status
            self.admission.admit(resource_type, obj, old=None, fields=fields)
            self._kind_specific_create(resource_type, obj)
            validate(resource_type, obj)
            return self.store.commit(resource_type.storage, obj, event_type="ADDED")

    def _kind_specific_create(self, resource_type: ResourceType, obj: JsonObject) -> None:
        meta = metadata(obj)
        if resource_type.kind == "Job" and not (obj.get("spec") or {}).get("manualSelector"):
            # The job controller's selector is the job's own uid, as defaulted upstream.
            uid, name = meta["uid"], meta["name"]
            job_labels = {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
            spec = obj.setdefault("spec", {})
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
            template_meta.setdefault("labels", {}).update(job_labels)
        elif resource_type.storage == _CRD_STORAGE:
            types = types_from_crd(obj)
            names = (obj.get("spec") or {}).get("names") or {}
            accepted = dict(names)
            accepted.setdefault("singular", str(names.get("kind", "")).lower())
            accepted.setdefault("listKind", f"{names.get('kind')}List")
            now = self.now()
            obj["status"] = {
                "acceptedNames": accepted,
                "storedVersions": [
                    v["name"] for v in obj["spec"]["versions"] if v.get("storage", True)
                ][:1],
                "conditions": [
                    {
                        "type": "NamesAccepted",
                        "status": "True",
                        "reason": "NoConflicts",
                        "message": "no conflicts found",
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "Established",
                        "status": "True",
                        "reason": "InitialNamesAccepted",
                        "message": "the initial names have been accepted",
                        "lastTransitionTime": now,
                    },
                ],
            }
            self.registry.register(types)

    # ---------------------------------------------------------------- update
    def _prepare_update(
        self,
        resource_type: ResourceType,
        current: JsonObject,
        *,
        incoming: JsonObject,
        subresource: str | None,
        fields: FieldValidation | None = None,
    ) -> JsonObject:
        if subresource == "status":
            # /status writes change status only; spec and metadata stay as stored.
            updated = copy.deepcopy(current)
            status = incoming.get("status")
            if status is None:
                updated.pop("status", None)
            else:
                updated["status"] = status
            self.admission.admit(resource_type, updated, old=current, fields=fields)
            return updated
        updated = incoming
        meta, current_meta = metadata(updated), current.get("metadata") or {}
        for key in (*_SERVER_OWNED_METADATA, "name", "namespace"):
            if key in current_meta:
                meta[key] = current_meta[key]
            else:
                meta.pop(key, None)
        if resource_type.has_status:
            # Writes to the main resource ignore status when /status exists.
            if "status" in current:
                updated["status"] = copy.deepcopy(current["status"])
            else:
                updated.pop("status", None)
        apply_defaults(resource_type, updated)
        self.admission.admit(resource_type, updated, old=current, fields=fields)
        validate(resource_type, updated)
        if spec_part(updated) != spec_part(current):
            meta["generation"] = int(current_meta.get("generation", 1)) + 1
        return updated

    def commit_update(
        self, resource_type: ResourceType, current: JsonObject, *, updated: JsonObject
    ) -> JsonObject:
        if _same_ignoring_version(current, updated):
            return current  # a no-op write keeps the resourceVersion, as upstream
        if resource_type.storage == _CRD_STORAGE:
            self.registry.register(types_from_crd(updated))
        return self.store.commit(resource_type.storage, updated, event_type="MODIFIED")

    def update(
        self,
        ref: ObjectRef,
        body: Any,
        *,
        subresource: str | None = None,
        fields: FieldValidation | None = None,
    ) -> JsonObject:
        """PUT: replace; 409 on a stale metadata.resourceVersion."""
        resource_type, namespace, name = ref.resource_type, ref.namespace, ref.name
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        incoming = accept(resource_type, body)
        sent_name = metadata(incoming).get("name")
        if sent_name and sent_name != name:
            raise bad_request(
                f"the name of the object ({sent_name}) does not match the name on the URL ({name})"
            )
        sent_namespace = metadata(incoming).get("namespace")
        if resource_type.namespaced and sent_namespace and sent_namespace != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        with self.store.lock:
            current = self.get_stored(ref)
            sent_version = metadata(incoming).get("resourceVersion")
            if sent_version:
                if str(sent_version) != current["metadata"]["resourceVersion"]:
                    raise conflict(resource_type.group_resource, name)
            elif resource_type.custom:
                raise invalid(
                    resource_type.kind,
                    name,
                    cause="metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                )
            updated = self._prepare_update(
                resource_type, current, incoming=incoming, subresource=subresource, fields=fields
            )
            return present(
                resource_type, self.commit_update(resource_type, current, updated=updated)
            )

    # ----------------------------------------------------------------- patch
    @staticmethod
    def apply_patch(
        resource_type: ResourceType | None, document: Any, *, raw: bytes, content_type: str
    ) -> Any:
        media_type = content_type.split(";")[0].strip().lower()
        patch = parse_json(raw)
        if media_type == MERGE_PATCH:
            return merge_patch(document, patch)
        if media_type == STRATEGIC_MERGE_PATCH:
            if resource_type is not None and resource_type.custom:
                raise ApiError(415, "strategic merge patch is not supported for custom resources")
            return strategic_merge_patch(document, patch)
        if media_type == JSON_PATCH:
            return json_patch(document, patch)
        if media_type == APPLY_PATCH:
            raise ApiError(415, "server-side apply is not supported by the loopback apiserver")
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted "
            f"media types include: {JSON_PATCH}, {MERGE_PATCH}, "
            f"{STRATEGIC_MERGE_PATCH}",
        )

    def patch(
        self,
        ref: ObjectRef,
        raw: bytes,
        *,
        content_type: str,
        subresource: str | None = None,
        fields: FieldValidation | None = None,
    ) -> JsonObject:
        """PATCH; 409 when the patched object carries a different resourceVersion."""
        resource_type, name = ref.resource_type, ref.name
        with self.store.lock:
            current = self.get_stored(ref)
            document = copy.deepcopy(present(resource_type, current))
            patched = self.apply_patch(resource_type, document, raw=raw, content_type=content_type)
            if not isinstance(patched, dict):
                raise invalid(
                    resource_type.kind, name, cause="the patched object is not a JSON object"
                )
            sent_version = (patched.get("metadata") or {}).get("resourceVersion")
            if sent_version and str(sent_version) != current["metadata"]["resourceVersion"]:
                raise conflict(resource_type.group_resource, name)
            incoming = accept(resource_type, patched)
            updated = self._prepare_update(
                resource_type, current, incoming=incoming, subresource=subresource, fields=fields
            )
            return present(
                resource_type, self.commit_update(resource_type, current, updated=updated)
            )

    # ---------------------------------------------------------------- delete
    def delete(self, ref: ObjectRef, options: JsonObject) -> JsonObject:
        """DELETE with preconditions and propagationPolicy; dependents are collected."""
        resource_type, namespace, name = ref.resource_type, ref.namespace, ref.name
        with self.store.lock:
            current = self.get_stored(ref)
            preconditions = options.get("preconditions") or {}
            meta = current["metadata"]
            if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
                raise conflict(resource_type.group_resource, name)
            wanted_version = preconditions.get("resourceVersion")
            if wanted_version and wanted_version != meta.get("resourceVersion"):
                raise conflict(resource_type.group_resource, name)
            policy = options.get("propagationPolicy")
            if policy is None:
                policy = "Orphan" if options.get("orphanDependents") else "Background"
            if policy not in ("Orphan", "Background", "Foreground"):
                raise invalid(
                    "DeleteOptions", "", cause=f'propagationPolicy: Unsupported value: "{policy}"'
                )
            deleted = self.delete_stored(resource_type.storage, (namespace, name), policy=policy)
        if resource_type.kind in _RETURNS_DELETED_OBJECT or resource_type.custom:
            return present(resource_type, deleted)
        return status_success(resource_type.group_resource, name, uid=str(meta.get("uid", "")))

    def delete_stored(self, storage: str, key: ObjectKey, *, policy: str) -> JsonObject:
        """Remove an object now and collect (or orphan) its dependents."""
        namespace, name = key
        with self.store.lock:
            current = self.store.get(storage, (namespace, name))
            if current is None:
                raise not_found(storage, name)
            if storage == _NAMESPACES:
                self._empty_namespace(name)
            elif storage == _CRD_STORAGE:
                self._drop_custom_resources(current)
            deleted = copy.deepcopy(current)
            if storage == _NAMESPACES:
                metadata(deleted)["deletionTimestamp"] = self.now()
                deleted["status"] = {"phase": "Terminating"}
            elif storage == "pods":
                # Pods end gracefully upstream; here the grace period is always over.
                metadata(deleted)["deletionTimestamp"] = self.now()
                metadata(deleted)["deletionGracePeriodSeconds"] = 0
            committed = self.store.commit(storage, deleted, event_type="DELETED")
            owner_uid = str(current["metadata"].get("uid", ""))
            for dependent_storage, dependent in self.store.dependents(owner_uid):
                if policy == "Orphan":
                    self._orphan(dependent_storage, dependent, owner_uid=owner_uid)
                elif self.store.get(dependent_storage, dependent) is not None:
                    self.delete_stored(dependent_storage, dependent, policy="Background")
            return committed

    def _orphan(self, storage: str, key: ObjectKey, *, owner_uid: str) -> None:
        current = self.store.get(storage, key)
        if current is None:
            return
        updated = copy.deepcopy(current)
        references = metadata(updated).get("ownerReferences") or []
        metadata(updated)["ownerReferences"] = [r for r in references if r.get("uid") != owner_uid]
        self.store.commit(storage, updated, event_type="MODIFIED")

    def _empty_namespace(self, namespace: str) -> None:
        for resource_type in self.registry.namespaced_storages():
            items, _ = self.store.items(resource_type.storage, namespace)
            for item in items:
                name = item["metadata"]["name"]
                if self.store.get(resource_type.storage, (namespace, name)) is not None:
                    self.delete_stored(
                        resource_type.storage, (namespace, name), policy="Background"
                    )

    def _drop_custom_resources(self, crd: JsonObject) -> None:
        types = types_from_crd(crd)
        if not types:
            return
        storage = types[0].storage
        items, _ = self.store.items(storage, None)
        for item in items:
            meta = item["metadata"]
            self.delete_stored(
                storage, (meta.get("namespace", ""), meta["name"]), policy="Background"
            )
        self.registry.unregister_storage(storage)

    # ------------------------------------------------- controller-side helpers
    def mutate(self, ref: ObjectRef, change: Callable[[JsonObject], None]) -> JsonObject | None:
        """Apply ``change`` to a private copy and commit it if anything changed.

        Used by the simulated controllers; bumps generation on spec changes.
        Returns the committed (or unchanged) object, None when it is gone.
        """
        resource_type = ref.resource_type
        with self.store.lock:
            current = self.store.get(resource_type.storage, ref.key)
            if current is None:
                return None
            updated = copy.deepcopy(current)
            change(updated)
            if spec_part(updated) != spec_part(current):
                metadata(updated)["generation"] = int(current["metadata"].get("generation", 1)) + 1
            return self.commit_update(resource_type, current, updated=updated)

    def ensure_system_namespaces(self) -> None:
        namespaces = self.registry.lookup("", "v1", plural=_NAMESPACES)
        for name in SYSTEM_NAMESPACES:
            if self.store.get(_NAMESPACES, ("", name)) is None:
                self.create_stored(namespaces, {"metadata": {"name": name}}, namespace="")
