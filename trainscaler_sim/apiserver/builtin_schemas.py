"""OpenAPI schemas of the built-in kinds, generated from the official client's models.

kube-apiserver publishes schemas compiled from its Go types; the ``kubernetes``
Python client is generated from that same OpenAPI document, so its models keep
every field's JSON name, type, description and whether it is required. Walking
them back gives definitions under kube's own names
(``io.k8s.api.apps.v1.Deployment``), good enough for ``kubectl explain`` and
unknown-field checks. Not kept by the client: patch strategies and exact
formats (quantities and int-or-string fields come out as plain strings/any).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .json_types import JsonObject
from .resources import BUILTIN_TYPES, ResourceType

_META_PACKAGE = "io.k8s.apimachinery.pkg.apis.meta.v1"
_APIEXTENSIONS_PACKAGE = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"
_META_TYPES = frozenset(
    {
        "ObjectMeta",
        "ListMeta",
        "LabelSelector",
        "LabelSelectorRequirement",
        "OwnerReference",
        "ManagedFieldsEntry",
        "Condition",
        "Status",
        "StatusDetails",
        "StatusCause",
        "DeleteOptions",
        "Preconditions",
    }
)
# Which API package owns a model, by the prefix of its kind-less name; the rest is core.
_PACKAGE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("Deployment", "apps"),
    ("StatefulSet", "apps"),
    ("ReplicaSet", "apps"),
    ("RollingUpdateDeployment", "apps"),
    ("RollingUpdateStatefulSet", "apps"),
    ("DaemonSet", "apps"),
    ("Job", "batch"),
    ("CronJob", "batch"),
    ("PodFailurePolicy", "batch"),
    ("UncountedTerminatedPods", "batch"),
    ("SuccessPolicy", "batch"),
    ("HorizontalPodAutoscaler", "autoscaling"),
    ("CrossVersionObjectReference", "autoscaling"),
    ("Lease", "coordination"),
)
_MODEL_NAME = re.compile(r"^(?:(Core|Events|Apiextensions)?)(V\d+(?:(?:alpha|beta)\d+)?)(\w+)$")
# The client models int-or-string fields as untyped "object".
_INT_OR_STRING = frozenset({"target_port", "max_surge", "max_unavailable", "port", "partition"})
# Lists kube merges by key under strategic merge patch (for explain and readers).
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "init_containers": "name",
    "ephemeral_containers": "name",
    "env": "name",
    "volumes": "name",
    "volume_mounts": "mountPath",
    "image_pull_secrets": "name",
    "owner_references": "uid",
    "conditions": "type",
}
_PRIMITIVES: dict[str, JsonObject] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int32"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytearray": {"type": "string", "format": "byte"},
    "bytes": {"type": "string", "format": "byte"},
}


def definition_name(model_name: str) -> str:
    """``V1PodSpec`` -> ``io.k8s.api.core.v1.PodSpec`` (kube's definition names)."""
    matched = _MODEL_NAME.match(model_name)
    if matched is None:
        return model_name
    origin, version, name = matched.group(1), matched.group(2).lower(), matched.group(3)
    if origin == "Events":
        return f"io.k8s.api.events.{version}.{name}"
    if origin == "Core":
        return f"io.k8s.api.core.{version}.{name}"
    if name in _META_TYPES:
        return f"{_META_PACKAGE}.{name}"
    if name.startswith(("CustomResource", "JSONSchemaProps", "ExternalDocumentation")):
        return f"{_APIEXTENSIONS_PACKAGE}.{name}"
    for prefix, package in _PACKAGE_PREFIXES:
        if name.startswith(prefix):
            return f"io.k8s.api.{package}.{version}.{name}"
    return f"io.k8s.api.core.{version}.{name}"


def _model_for(resource_type: ResourceType) -> str:
    version = resource_type.version.capitalize()
    if resource_type.kind == "Event":
        return "EventsV1Event" if resource_type.group == "events.k8s.io" else "CoreV1Event"
    return f"{version}{resource_type.kind}"


@dataclass
class _Walker:
    """Collects definitions reachable from the models walked so far."""

    ref_prefix: str
    definitions: dict[str, JsonObject] = field(default_factory=dict)

    def schema_for(self, type_name: str, *, field_name: str = "") -> JsonObject:
        if type_name in _PRIMITIVES:
            return dict(_PRIMITIVES[type_name])
        if type_name == "object":
            if field_name in _INT_OR_STRING:
                return {"x-kubernetes-int-or-string": True}
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if type_name.startswith("List[") and type_name.endswith("]"):
            return {"type": "array", "items": self.schema_for(type_name[5:-1])}
        if type_name.startswith("Dict[") and type_name.endswith("]"):
            value_type = type_name[5:-1].split(",", 1)[1].strip()
            return {"type": "object", "additionalProperties": self.schema_for(value_type)}
        self.walk(type_name)
        return {"$ref": f"{self.ref_prefix}{definition_name(type_name)}"}

    def walk(self, model_name: str) -> str:
        name = definition_name(model_name)
        if name in self.definitions:
            return name
        # Imported here: the client's models take a second to load, and the server
        # must start in milliseconds; only OpenAPI and strict validation need them.
        from kubernetes.client import models

        model = getattr(models, model_name, None)
        if model is None:
            self.definitions[name] = {"type": "object"}
            return name
        schema: JsonObject = {"type": "object"}
        self.definitions[name] = schema  # placed first: the models are recursive
        description = _description(model)
        if description:
            schema["description"] = description
        fields = getattr(model, "model_fields", {})
        properties: JsonObject = {}
        required: list[str] = []
        for attribute, type_name in model.openapi_types.items():
            json_name = model.attribute_map[attribute]
            prop = self.schema_for(type_name, field_name=attribute)
            info = fields.get(attribute)
            text = getattr(info, "description", None) if info is not None else None
            if text:
                prop = {"allOf": [prop], "description": text} if "$ref" in prop else prop
                prop["description"] = text
            if attribute in _MERGE_KEYS and prop.get("type") == "array":
                prop["x-kubernetes-patch-strategy"] = "merge"
                prop["x-kubernetes-patch-merge-key"] = _MERGE_KEYS[attribute]
            properties[json_name] = prop
            if info is not None and info.is_required():
                required.append(json_name)
        if properties:
            schema["properties"] = properties
        if required:
            schema["required"] = required
        return name


def _description(model: type) -> str:
    text = (model.__doc__ or "").strip()
    return text.split("\n\n", 1)[0].strip() if text else ""


def builtin_definitions(ref_prefix: str) -> tuple[dict[str, JsonObject], dict[ResourceType, str]]:
    """All definitions the built-in kinds reach, and each kind's definition name.

    ``ref_prefix`` is ``#/definitions/`` for OpenAPI v2, ``#/components/schemas/`` for v3.
    """
    walker = _Walker(ref_prefix)
    roots: dict[ResourceType, str] = {}
    for resource_type in BUILTIN_TYPES:
        model_name = _model_for(resource_type)
        root = walker.walk(model_name)
        list_root = walker.walk(f"{model_name}List")
        gvk = {
            "group": resource_type.group,
            "version": resource_type.version,
            "kind": resource_type.kind,
        }
        walker.definitions[root]["x-kubernetes-group-version-kind"] = [gvk]
        walker.definitions[list_root]["x-kubernetes-group-version-kind"] = [
            {**gvk, "kind": f"{resource_type.kind}List"}
        ]
        roots[resource_type] = root
    return walker.definitions, roots
