"""Schema admission of writes: field validation, CRD pruning/defaulting/validation, CEL.

Runs inside create and update (and patch, on the patched object) under the
store lock. For a custom resource: unknown fields are reported per the
request's ``fieldValidation`` (Strict: 400; Warn, the default: a ``Warning``
header) and pruned, schema defaults are applied, then the schema and its CEL
rules are checked (422 Invalid with kube's causes). A CRD whose rules do not
compile is itself invalid. Built-in kinds are only checked for unknown fields,
and only when the client asks for ``fieldValidation=Strict`` (as kubectl does):
the loopback server keeps their unknown fields rather than dropping them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cel_rules import RULES_NOT_CHECKED, CelRules, has_rules
from .errors import ApiError, bad_request
from .json_types import JsonObject
from .openapi import CRD_STORAGE, OpenApiPublisher, crd_version_schema
from .resources import ResourceType
from .schema_validation import (
    ABSENT,
    FieldError,
    apply_schema_defaults,
    prune,
    unknown_fields,
    validate_value,
)
from .store import ObjectStore

_DIRECTIVES = ("Strict", "Warn", "Ignore")


@dataclass
class FieldValidation:
    """A request's ``fieldValidation`` directive, and the warnings it collected."""

    directive: str = "Warn"
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_params(cls, params: dict[str, str]) -> FieldValidation:
        directive = params.get("fieldValidation") or "Warn"
        if directive not in _DIRECTIVES:
            raise bad_request(
                f'fieldValidation: Unsupported value: "{directive}": supported values: '
                '"Ignore", "Strict", "Warn"'
            )
        return cls(directive)

    def report(self, resource_type: ResourceType, unknown: list[str]) -> None:
        if not unknown or self.directive == "Ignore":
            return
        if self.directive == "Strict":
            listed = ", ".join(f'unknown field "{path}"' for path in unknown)
            kind, version = resource_type.kind, resource_type.version
            raise bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: '
                f"strict decoding error: {listed}"
            )
        self.warnings += [f'unknown field "{path}"' for path in unknown]


def invalid_object(resource_type: ResourceType, name: str, *, errors: list[FieldError]) -> ApiError:
    """422 Invalid as kube words it: ``Kind.group "name" is invalid: [a, b]``."""
    qualified = (
        f"{resource_type.kind}.{resource_type.group}" if resource_type.group else resource_type.kind
    )
    body = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details: JsonObject = {
        "name": name,
        "kind": resource_type.kind,
        "causes": [error.cause() for error in errors],
    }
    if resource_type.group:
        details["group"] = resource_type.group
    return ApiError(422, f'{qualified} "{name}" is invalid: {body}', details=details)


class SchemaAdmission:
    """Looks up the schema a write is checked against and applies it."""

    def __init__(self, store: ObjectStore, publisher: OpenApiPublisher) -> None:
        self._store = store
        self._publisher = publisher
        self._cel = CelRules()

    def admit(
        self,
        resource_type: ResourceType,
        obj: JsonObject,
        *,
        old: JsonObject | None,
        fields: FieldValidation | None,
    ) -> None:
        """Check (and for custom resources prune and default) ``obj`` in place."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        if resource_type.custom:
            self._admit_custom(resource_type, obj, old=old, fields=fields, name=name)
        elif resource_type.storage == CRD_STORAGE:
            self._admit_crd(resource_type, obj, name=name)
        elif fields is not None and fields.directive == "Strict":
            found = self._publisher.builtin_schema(resource_type)
            if found is not None:
                schema, resolve = found
                fields.report(resource_type, unknown_fields(obj, schema, resolve=resolve))

    def _admit_custom(
        self,
        resource_type: ResourceType,
        obj: JsonObject,
        *,
        old: JsonObject | None,
        fields: FieldValidation | None,
        name: str,
    ) -> None:
        crd = self._store.get(CRD_STORAGE, ("", resource_type.storage))
        schema = crd_version_schema(crd or {}, resource_type.version)
        if schema is None:
            return
        # spec.preserveUnknownFields (legacy CRDs) turns pruning off for the whole object.
        if not (crd or {}).get("spec", {}).get("preserveUnknownFields"):
            if fields is not None:
                fields.report(resource_type, unknown_fields(obj, schema))
            prune(obj, schema)
        apply_schema_defaults(obj, schema)
        previous = ABSENT if old is None else old
        errors = validate_value(obj, schema, old=previous)
        if not errors:
            errors = self._cel.check(obj, schema, old=previous)
        elif has_rules(schema):
            # As kube: rules are not run on an object that fails its schema, and it says so.
            errors.append(RULES_NOT_CHECKED)
        if errors:
            raise invalid_object(resource_type, name, errors=errors)

    def _admit_crd(self, resource_type: ResourceType, crd: JsonObject, *, name: str) -> None:
        problems: list[FieldError] = []
        for index, version in enumerate((crd.get("spec") or {}).get("versions") or []):
            schema: Any = (version.get("schema") or {}).get("openAPIV3Schema")
            path = f"spec.versions[{index}].schema.openAPIV3Schema"
            for problem in self._cel.compile_errors(schema, path=path):
                where, _, detail = problem.partition(": ")
                problems.append(FieldError(where, "FieldValueInvalid", detail))
        if problems:
            raise invalid_object(resource_type, name, errors=problems)
