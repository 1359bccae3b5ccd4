"""OpenAPI documents: ``/openapi/v2`` and ``/openapi/v3`` (index and one per group/version).

Built-in kinds come from ``builtin_schemas``; each installed CRD version is
published from its ``openAPIV3Schema`` the way kube-apiserver's CRD builder
does it: ``metadata`` becomes a reference to ObjectMeta, the kind and its List
carry ``x-kubernetes-group-version-kind``, and definitions are named by the
reversed group (``io.trainscaler.v1alpha1.ElasticJob``). Every write operation
lists the ``fieldValidation`` query parameter, which is what tells kubectl to
leave validation to the server (``kubectl apply`` without ``--validate=false``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .builtin_schemas import builtin_definitions
from .json_types import JsonObject
from .resources import ResourceType

V2_PREFIX = "#/definitions/"
V3_PREFIX = "#/components/schemas/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
_METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers "
    "should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values."
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers "
    "may infer this from the endpoint the client submits requests to. Cannot be updated. In "
    "CamelCase."
)
_QUERY_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "pretty")
JSON = "application/json"


def crd_definition_name(group: str, version: str, *, kind: str) -> str:
    """``trainscaler.io`` v1alpha1 ElasticJob -> ``io.trainscaler.v1alpha1.ElasticJob``."""
    return ".".join([*reversed(group.split(".")), version, kind])


def crd_version_schema(crd: JsonObject, version: str) -> JsonObject | None:
    """The ``openAPIV3Schema`` a CRD declares for one version, if any."""
    spec = crd.get("spec") or {}
    for entry in spec.get("versions") or []:
        if entry.get("name") == version:
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, dict) else None
    return None


def _crd_definitions(crd: JsonObject, version: str, *, prefix: str) -> dict[str, JsonObject]:
    spec = crd.get("spec") or {}
    group, kind = str(spec.get("group")), str((spec.get("names") or {}).get("kind"))
    gvk = {"group": group, "version": version, "kind": kind}
    schema = copy.deepcopy(crd_version_schema(crd, version) or {"type": "object"})
    schema.setdefault("type", "object")
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string", "description": _API_VERSION_DESCRIPTION}
    properties["kind"] = {"type": "string", "description": _KIND_DESCRIPTION}
    properties["metadata"] = {
        "allOf": [{"$ref": prefix + _OBJECT_META}],
        "description": _METADATA_DESCRIPTION,
    }
    schema["x-kubernetes-group-version-kind"] = [gvk]
    name = crd_definition_name(group, version, kind=kind)
    list_schema: JsonObject = {
        "type": "object",
        "description": f"{kind}List is a list of {kind}",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DESCRIPTION},
            "items": {"type": "array", "items": {"$ref": prefix + name}},
            "kind": {"type": "string", "description": _KIND_DESCRIPTION},
            "metadata": {"allOf": [{"$ref": prefix + _LIST_META}]},
        },
        "x-kubernetes-group-version-kind": [{**gvk, "kind": f"{kind}List"}],
    }
    return {name: schema, f"{name}List": list_schema}


def _references(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[1]
            else:
                yield from _references(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _references(item)


def _closure(roots: Iterable[str], definitions: dict[str, JsonObject]) -> dict[str, JsonObject]:
    chosen: dict[str, JsonObject] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in chosen or name not in definitions:
            continue
        chosen[name] = definitions[name]
        pending.extend(_references(definitions[name]))
    return dict(sorted(chosen.items()))


def _base_path(resource_type: ResourceType) -> str:
    if resource_type.group:
        return f"/apis/{resource_type.group}/{resource_type.version}"
    return f"/api/{resource_type.version}"


def _operation_id(verb: str, resource_type: ResourceType, *, collection: bool) -> str:
    group = "".join(part.capitalize() for part in resource_type.group.split(".")) or "Core"
    scope = "Namespaced" if resource_type.namespaced else ""
    suffix = "List" if collection and verb == "list" else ""
    return f"{verb}{group}{resource_type.version.capitalize()}{scope}{resource_type.kind}{suffix}"


def _parameter(name: str, *, where: str, v3: bool) -> JsonObject:
    parameter: JsonObject = {"name": name, "in": where, "uniqueItems": True}
    if where == "path":
        parameter["required"] = True
    if v3:
        parameter["schema"] = {"type": "string"}
    else:
        parameter["type"] = "string"
    return parameter


def _operation(
    verb: str,
    resource_type: ResourceType,
    *,
    ref: str,
    collection: bool,
    v3: bool,
) -> JsonObject:
    action = {"list": "list", "get": "get", "create": "post", "replace": "put"}.get(verb, verb)
    operation: JsonObject = {
        "operationId": _operation_id(verb, resource_type, collection=collection),
        "tags": [resource_type.group or "core"],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": resource_type.group,
            "version": resource_type.version,
            "kind": resource_type.kind,
        },
    }
    if verb in ("create", "replace", "patch"):
        operation["parameters"] = [
            _parameter(name, where="query", v3=v3) for name in _QUERY_PARAMETERS
        ]
        body_ref = (
            ref
            if verb != "patch"
            else ref.rsplit("/", 1)[0] + "/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
        )
        media = (
            ["application/json-patch+json", "application/merge-patch+json"]
            if verb == "patch"
            else [JSON]
        )
        if v3:
            operation["requestBody"] = {
                "content": {media_type: {"schema": {"$ref": body_ref}} for media_type in media},
                "required": True,
            }
        else:
            operation["consumes"] = media
            operation["parameters"].append(
                {"name": "body", "in": "body", "required": True, "schema": {"$ref": body_ref}}
            )
    list_ref = ref + "List" if collection and verb == "list" else ref
    if v3:
        operation["responses"] = {
            "200": {"description": "OK", "content": {JSON: {"schema": {"$ref": list_ref}}}}
        }
    else:
        operation["produces"] = [JSON]
        operation["responses"] = {"200": {"description": "OK", "schema": {"$ref": list_ref}}}
    return operation


def _paths(resource_type: ResourceType, *, ref: str, v3: bool) -> dict[str, JsonObject]:
    base = _base_path(resource_type)
    scoped = f"{base}/namespaces/{{namespace}}" if resource_type.namespaced else base
    common = [_parameter("namespace", where="path", v3=v3)] if resource_type.namespaced else []
    collection: JsonObject = {
        "get": _operation("list", resource_type, ref=ref, collection=True, v3=v3),
        "post": _operation("create", resource_type, ref=ref, collection=True, v3=v3),
    }
    item: JsonObject = {
        "get": _operation("read", resource_type, ref=ref, collection=False, v3=v3),
        "put": _operation("replace", resource_type, ref=ref, collection=False, v3=v3),
        "patch": _operation("patch", resource_type, ref=ref, collection=False, v3=v3),
        "delete": _operation("delete", resource_type, ref=ref, collection=False, v3=v3),
    }
    if common:
        collection["parameters"] = common
    item["parameters"] = [*common, _parameter("name", where="path", v3=v3)]
    return {
        f"{scoped}/{resource_type.plural}": collection,
        f"{scoped}/{resource_type.plural}/{{name}}": item,
    }


@dataclass
class OpenApiPublisher:
    """Builds and caches the documents; built-in schemas are generated on first use."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _builtin: dict[str, tuple[dict[str, JsonObject], dict[ResourceType, str]]] = field(
        default_factory=dict
    )

    def _definitions(
        self, prefix: str, *, crds: list[JsonObject]
    ) -> tuple[dict[str, JsonObject], dict[tuple[str, str, str], str]]:
        with self._lock:
            if prefix not in self._builtin:
                self._builtin[prefix] = builtin_definitions(prefix)
            builtin, roots = self._builtin[prefix]
        definitions = dict(builtin)
        definitions["io.k8s.apimachinery.pkg.apis.meta.v1.Patch"] = {
            "type": "object",
            "description": "Patch is provided to give a concrete name and type to the "
            "Kubernetes PATCH request body.",
        }
        names = {(t.group, t.version, t.kind): name for t, name in roots.items()}
        for crd in crds:
            spec = crd.get("spec") or {}
            for entry in spec.get("versions") or []:
                if not entry.get("served", True):
                    continue
                version = str(entry.get("name"))
                crd_defs = _crd_definitions(crd, version, prefix=prefix)
                definitions.update(crd_defs)
                kind = str((spec.get("names") or {}).get("kind"))
                names[(str(spec.get("group")), version, kind)] = next(iter(crd_defs))
        return definitions, names

    def builtin_schema(
        self, resource_type: ResourceType
    ) -> tuple[JsonObject, Callable[[str], JsonObject | None]] | None:
        """A built-in kind's schema and a resolver for its references (None for events.k8s.io,
        whose objects are stored in core/v1 form)."""
        if resource_type.group == "events.k8s.io":
            return None
        with self._lock:
            if V3_PREFIX not in self._builtin:
                self._builtin[V3_PREFIX] = builtin_definitions(V3_PREFIX)
            definitions, roots = self._builtin[V3_PREFIX]
        name = roots.get(resource_type)
        if name is None:
            return None
        return definitions[name], definitions.get

    def group_version_document(
        self, types: list[ResourceType], *, crds: list[JsonObject]
    ) -> JsonObject:
        """One ``/openapi/v3/api(s)/...`` document: the group/version's paths and schemas."""
        definitions, names = self._definitions(V3_PREFIX, crds=crds)
        paths: JsonObject = {}
        roots: list[str] = ["io.k8s.apimachinery.pkg.apis.meta.v1.Patch"]
        for resource_type in types:
            name = names.get((resource_type.group, resource_type.version, resource_type.kind))
            if name is None:
                continue
            roots += [name, f"{name}List"]
            paths.update(_paths(resource_type, ref=V3_PREFIX + name, v3=True))
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": paths,
            "components": {"schemas": _closure(roots, definitions)},
        }

    def swagger_document(self, types: list[ResourceType], *, crds: list[JsonObject]) -> JsonObject:
        """The single ``/openapi/v2`` document."""
        definitions, names = self._definitions(V2_PREFIX, crds=crds)
        paths: JsonObject = {}
        for resource_type in types:
            name = names.get((resource_type.group, resource_type.version, resource_type.kind))
            if name is not None:
                paths.update(_paths(resource_type, ref=V2_PREFIX + name, v3=False))
        return {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": dict(sorted(paths.items())),
            "definitions": definitions,
        }


def group_version_path(resource_type: ResourceType) -> str:
    """``api/v1`` or ``apis/apps/v1``: the key of the v3 index."""
    return _base_path(resource_type).lstrip("/")


def document_hash(document: JsonObject) -> str:
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha512(data).hexdigest()[:64].upper()


CRD_STORAGE = "customresourcedefinitions.apiextensions.k8s.io"


@dataclass(frozen=True)
class OpenApiResponse:
    content_type: str
    body: bytes


def _accepts_json(accept: str) -> bool:
    media = [part.split(";")[0].strip().lower() for part in accept.split(",") if part.strip()]
    return not media or any(m in (JSON, "*/*", "application/*") for m in media)


def serve_openapi(
    publisher: OpenApiPublisher,
    path: str,
    *,
    types: list[ResourceType],
    crds: list[JsonObject],
    accept: str,
) -> OpenApiResponse | None:
    """The answer to GET ``path`` under /openapi, or None for 404; raises nothing else.

    /openapi/v2 is JSON only: a client asking for protobuf alone gets 406, and
    kubectl, which asks for protobuf, then does without v2 (it uses v3).
    """
    trimmed = path.rstrip("/")
    if trimmed == "/openapi/v2":
        if not _accepts_json(accept):
            return OpenApiResponse("", b"")
        document = publisher.swagger_document(types, crds=crds)
        return OpenApiResponse(JSON, json.dumps(document, separators=(",", ":")).encode())
    by_path: dict[str, list[ResourceType]] = {}
    for resource_type in types:
        by_path.setdefault(group_version_path(resource_type), []).append(resource_type)
    if trimmed == "/openapi/v3":
        index = {
            gv: {
                "serverRelativeURL": f"/openapi/v3/{gv}?hash="
                + document_hash(publisher.group_version_document(gv_types, crds=crds))
            }
            for gv, gv_types in sorted(by_path.items())
        }
        return OpenApiResponse(JSON, json.dumps({"paths": index}).encode())
    prefix = "/openapi/v3/"
    if trimmed.startswith(prefix) and trimmed[len(prefix) :] in by_path:
        document = publisher.group_version_document(by_path[trimmed[len(prefix) :]], crds=crds)
        return OpenApiResponse(JSON, json.dumps(document, separators=(",", ":")).encode())
    return None
