"""Structural-schema semantics of CRDs: pruning, defaulting and validation.

What kube-apiserver does with a custom resource's ``openAPIV3Schema`` before
it stores it, in the same order: unknown fields are pruned (except under
``x-kubernetes-preserve-unknown-fields`` and in an embedded resource's
apiVersion/kind/metadata), ``default`` values fill absent fields, then the
value is checked for type, required, enum, minimum/maximum, length, pattern,
items and properties counts and list uniqueness. Errors read as kube's
``field.Error`` strings (``spec.maxReplicas: Required value``); CEL rules live
in ``cel_rules``. ``$ref`` (built-in schemas) resolves through ``resolve``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .json_types import JsonObject

Resolver = Callable[[str], JsonObject | None]
_ROOT_KEPT = ("apiVersion", "kind", "metadata")
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: where, why (a kube CauseType) and the message body."""

    field: str
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail

    def cause(self) -> JsonObject:
        return {"reason": self.reason, "message": self.detail, "field": self.field}


def child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _no_resolver(_: str) -> JsonObject | None:
    return None


def resolved(schema: Any, resolve: Resolver = _no_resolver) -> JsonObject:
    """The schema with ``$ref`` and single-element ``allOf`` wrappers followed."""
    seen = 0
    while isinstance(schema, dict) and seen < 50:
        seen += 1
        if "$ref" in schema:
            schema = resolve(str(schema["$ref"]).rsplit("/", 1)[1]) or {}
        elif "allOf" in schema and len(schema["allOf"]) == 1 and "properties" not in schema:
            schema = schema["allOf"][0]
        else:
            return schema
    return schema if isinstance(schema, dict) else {}


def json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _show(value: Any) -> str:
    """How field.Invalid prints a value: strings quoted, numbers bare."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(json_type_name(value))


# --------------------------------------------------------------- pruning
def unknown_fields(
    value: Any, schema: Any, *, path: str = "", resolve: Resolver = _no_resolver, root: bool = True
) -> list[str]:
    """Paths of the fields the schema does not know (what pruning would drop)."""
    schema = resolved(schema, resolve)
    found: list[str] = []
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return found
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for key, item in value.items():
            where = child_path(path, key)
            if key in properties:
                metadata_schema = resolved(properties[key], resolve)
                if (
                    (root or embedded)
                    and key == "metadata"
                    and not metadata_schema.get("properties")
                ):
                    continue  # kube never prunes an object's own metadata
                found += unknown_fields(
                    item, properties[key], path=where, resolve=resolve, root=False
                )
            elif isinstance(additional, dict):
                found += unknown_fields(item, additional, path=where, resolve=resolve, root=False)
            elif (
                ((root or embedded) and key in _ROOT_KEPT)
                or additional is True
                or schema.get("x-kubernetes-preserve-unknown-fields")
            ):
                continue
            else:
                found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += unknown_fields(
                item, schema["items"], path=f"{path}[{index}]", resolve=resolve, root=False
            )
    return found


def prune(value: Any, schema: JsonObject, *, root: bool = True) -> None:
    """Drop, in place, the fields ``unknown_fields`` reports (CRD schemas, no refs)."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            if key in properties:
                if not ((root or embedded) and key == "metadata"):
                    prune(value[key], properties[key], root=False)
            elif isinstance(additional, dict):
                prune(value[key], additional, root=False)
            elif (root or embedded) and key in _ROOT_KEPT:
                continue
            elif not (additional is True or schema.get("x-kubernetes-preserve-unknown-fields")):
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            prune(item, schema["items"], root=False)


# -------------------------------------------------------------- defaulting
def apply_schema_defaults(value: Any, schema: JsonObject) -> None:
    """Fill absent fields from ``default`` (copied), outermost first, in place."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if key not in value and isinstance(sub, dict) and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            if key in properties:
                apply_schema_defaults(item, properties[key])
            elif isinstance(schema.get("additionalProperties"), dict):
                apply_schema_defaults(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_schema_defaults(item, schema["items"])


# -------------------------------------------------------------- validation
def _type_errors(value: Any, schema: JsonObject, *, path: str) -> list[FieldError]:
    if value is None:
        if schema.get("nullable"):
            return []
        wanted = schema.get("type")
        if not wanted:
            return []
        return [
            FieldError(
                path,
                "FieldValueTypeInvalid",
                f'Invalid value: "null": {path} in body must be of type {wanted}: "null"',
            )
        ]
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return []
        return [
            FieldError(
                path,
                "FieldValueTypeInvalid",
                f"Invalid value: {_show(value)}: {path} in body must be of type "
                f'integer-or-string: "{json_type_name(value)}"',
            )
        ]
    wanted = schema.get("type")
    if not wanted or wanted not in _JSON_TYPES:
        return []
    matches = isinstance(value, _JSON_TYPES[wanted]) and not (
        isinstance(value, bool) and wanted in ("integer", "number")
    )
    if wanted == "integer" and isinstance(value, float) and value.is_integer():
        matches = True
    if matches:
        return []
    actual = json_type_name(value)
    return [
        FieldError(
            path,
            "FieldValueTypeInvalid",
            f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"',
        )
    ]


def _bounds_errors(value: Any, schema: JsonObject, *, path: str) -> list[FieldError]:
    errors: list[FieldError] = []

    def invalid(text: str) -> None:
        errors.append(
            FieldError(
                path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {path} in body {text}"
            )
        )

    if isinstance(value, int | float) and not isinstance(value, bool):
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        if minimum is not None:
            if schema.get("exclusiveMinimum") and value <= minimum:
                invalid(f"should be greater than {minimum}")
            elif value < minimum:
                invalid(f"should be greater than or equal to {minimum}")
        if maximum is not None:
            if schema.get("exclusiveMaximum") and value >= maximum:
                invalid(f"should be less than {maximum}")
            elif value > maximum:
                invalid(f"should be less than or equal to {maximum}")
        multiple = schema.get("multipleOf")
        if multiple and value % multiple:
            invalid(f"should be a multiple of {multiple}")
    if isinstance(value, str):
        if schema.get("minLength") is not None and len(value) < schema["minLength"]:
            invalid(f"should be at least {schema['minLength']} chars long")
        if schema.get("maxLength") is not None and len(value) > schema["maxLength"]:
            invalid(f"should be at most {schema['maxLength']} chars long")
        pattern = schema.get("pattern")
        if pattern and re.search(pattern, value) is None:
            invalid(f"should match '{pattern}'")
    if isinstance(value, list):
        if schema.get("minItems") is not None and len(value) < schema["minItems"]:
            invalid(f"should have at least {schema['minItems']} items")
        if schema.get("maxItems") is not None and len(value) > schema["maxItems"]:
            invalid(f"should have at most {schema['maxItems']} items")
    if isinstance(value, dict):
        if schema.get("minProperties") is not None and len(value) < schema["minProperties"]:
            invalid(f"should have at least {schema['minProperties']} properties")
        if schema.get("maxProperties") is not None and len(value) > schema["maxProperties"]:
            invalid(f"should have at most {schema['maxProperties']} properties")
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(json.dumps(item) for item in enum)
        errors.append(
            FieldError(
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_show(value)}: supported values: {supported}",
            )
        )
    return errors


def _list_errors(value: list[Any], schema: JsonObject, *, path: str) -> list[FieldError]:
    list_type = schema.get("x-kubernetes-list-type")
    errors: list[FieldError] = []
    if list_type == "set":
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                errors.append(
                    FieldError(
                        f"{path}[{index}]",
                        "FieldValueDuplicate",
                        f"Duplicate value: {json.dumps(item)}",
                    )
                )
            seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[tuple[Any, ...]] = []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k) for k in keys)
            if key in seen_keys:
                shown = ", ".join(f'"{k}":{json.dumps(item.get(k))}' for k in keys)
                errors.append(
                    FieldError(
                        f"{path}[{index}]",
                        "FieldValueDuplicate",
                        f"Duplicate value: map[string]interface {{}}{{{shown}}}",
                    )
                )
            seen_keys.append(key)
    return errors


class _Absent:
    """No old value at this path (a create, or a field the update adds)."""


ABSENT: Any = _Absent()


def old_child(old: Any, key: str) -> Any:
    return old.get(key, ABSENT) if isinstance(old, dict) else ABSENT


def old_items(old: Any, schema: JsonObject) -> Callable[[Any], Any]:
    """Pairs a list item with its old version: by key in map lists, by value in sets.

    Atomic lists are not correlated, as in kube's ratcheting.
    """
    list_type = schema.get("x-kubernetes-list-type")
    if not isinstance(old, list) or list_type not in ("map", "set"):
        return lambda item: ABSENT
    if list_type == "set":
        return lambda item: item if item in old else ABSENT
    keys = schema.get("x-kubernetes-list-map-keys") or []
    by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
    return lambda item: (
        by_key.get(tuple(item.get(k) for k in keys), ABSENT) if isinstance(item, dict) else ABSENT
    )


def validate_value(
    value: Any, schema: Any, *, path: str = "", old: Any = ABSENT
) -> list[FieldError]:
    """Every schema violation in ``value`` (CRD schemas: no ``$ref``).

    Validation ratcheting (kube 1.30+): on update, a value equal to its old
    version is not validated again, so tightening a schema does not block
    updates of other fields.
    """
    if not isinstance(schema, dict) or (old is not ABSENT and value == old):
        return []
    errors = _type_errors(value, schema, path=path)
    if errors or value is None:
        return errors
    errors += _bounds_errors(value, schema, path=path)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                errors.append(
                    FieldError(child_path(path, name), "FieldValueRequired", "Required value")
                )
        for key, item in value.items():
            if key in properties:
                if not path and key == "metadata":
                    continue  # object metadata is validated as ObjectMeta, not by the schema
                errors += validate_value(
                    item, properties[key], path=child_path(path, key), old=old_child(old, key)
                )
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate_value(
                    item,
                    schema["additionalProperties"],
                    path=child_path(path, key),
                    old=old_child(old, key),
                )
    elif isinstance(value, list):
        errors += _list_errors(value, schema, path=path)
        if isinstance(schema.get("items"), dict):
            previous = old_items(old, schema)
            for index, item in enumerate(value):
                errors += validate_value(
                    item, schema["items"], path=f"{path}[{index}]", old=previous(item)
                )
    return errors
