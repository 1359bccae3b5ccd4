"""CRD validation rules (``x-kubernetes-validations``) evaluated with cel-python.

Each rule runs where it is declared, with ``self`` bound to the value there
and, on update, ``oldSelf`` to the stored value (a rule that mentions
``oldSelf`` is a transition rule and is skipped when there is no old value, as
in kube). A false result is ``Invalid value: "<type>": <message>`` at the
node's path (plus the rule's ``fieldPath``); an evaluation error reports the
error instead. cel-python is the ``trainscaler_sim`` extra's dependency: the production
``workers`` package never imports this.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .errors import ApiError
from .json_types import JsonObject
from .schema_validation import ABSENT, FieldError, child_path, old_child, old_items

if TYPE_CHECKING:
    import celpy

_RULES = "x-kubernetes-validations"


def _environment() -> celpy.Environment:
    """cel-python, imported on the first rule (it takes ~0.5 s to load)."""
    try:
        import celpy
    except ImportError as error:  # an install without the trainscaler_sim/embedded extras
        raise ApiError(
            500,
            "x-kubernetes-validations need cel-python: pip install 'trainscaler[sim]'",
        ) from error
    return celpy.Environment()


RULES_NOT_CHECKED = FieldError(
    "<nil>",
    "FieldValueInvalid",
    "Invalid value: null: some validation rules were not checked because the object was "
    "invalid; correct the existing errors to complete validation",
)


def has_rules(schema: Any) -> bool:
    """Whether any node of a schema declares x-kubernetes-validations."""
    if isinstance(schema, dict):
        return bool(schema.get(_RULES)) or any(has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_rules(item) for item in schema)
    return False


class CelRules:
    """Compiles each rule once and evaluates rules against values."""

    def __init__(self) -> None:
        self._environment: celpy.Environment | None = None
        self._programs: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _program(self, rule: str) -> Any:
        with self._lock:
            program = self._programs.get(rule)
            if program is None:
                if self._environment is None:
                    self._environment = _environment()
                program = self._environment.program(self._environment.compile(rule))
                self._programs[rule] = program
            return program

    def compile_errors(self, schema: Any, *, path: str) -> list[str]:
        """Rules in a CRD schema that do not compile: a CRD carrying one is invalid."""
        errors: list[str] = []
        if not isinstance(schema, dict):
            return errors
        for index, entry in enumerate(schema.get(_RULES) or []):
            rule = str((entry or {}).get("rule", ""))
            try:
                self._program(rule)
            except ApiError:
                raise
            except Exception as error:  # celpy raises its own parse error types
                errors.append(
                    f"{path}.{_RULES}[{index}].rule: Invalid value: {rule!r}: compilation failed: "
                    + str(error).splitlines()[0]
                )
        for key, sub in (schema.get("properties") or {}).items():
            errors += self.compile_errors(sub, path=f"{path}.properties[{key}]")
        for key in ("items", "additionalProperties"):
            errors += self.compile_errors(schema.get(key), path=f"{path}.{key}")
        return errors

    def _evaluate(self, rule: str, activation: dict[str, Any]) -> tuple[bool, str]:
        program = self._program(rule)
        with self._lock:
            try:
                result = program.evaluate(activation)
            except Exception as error:  # CELEvalError and friends
                return False, str(error.args[0] if error.args else error)
        if isinstance(result, Exception):
            return False, str(result.args[0] if result.args else result)
        return bool(result), ""

    def _check_node(
        self, value: Any, schema: JsonObject, *, old: Any, path: str
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        unchanged = old is not ABSENT and value == old
        for entry in schema.get(_RULES) or []:
            rule = str(entry.get("rule", ""))
            transition = "oldSelf" in rule
            # Transition rules need an old value; other rules ratchet on unchanged values.
            if (transition and old is ABSENT) or (unchanged and not transition):
                continue
            from celpy.adapter import json_to_cel

            activation = {"self": json_to_cel(value)}
            if old is not ABSENT:
                activation["oldSelf"] = json_to_cel(old)
            passed, failure = self._evaluate(rule, activation)
            if passed:
                continue
            where = path
            field_path = str(entry.get("fieldPath") or "")
            if field_path:
                where = f"{path}{field_path}" if path else field_path.lstrip(".")
            message = failure or str(entry.get("message") or f"failed rule: {rule}")
            message_expression = entry.get("messageExpression")
            if message_expression and not failure:
                shown, text = self._message(str(message_expression), activation)
                message = text if shown else message
            # kube 1.3x words rule failures without the value ("Invalid value: <message>").
            errors.append(
                FieldError(
                    where,
                    str(entry.get("reason") or "FieldValueInvalid"),
                    f"Invalid value: {message}",
                )
            )
        return errors

    def _message(self, expression: str, activation: dict[str, Any]) -> tuple[bool, str]:
        try:
            program = self._program(expression)
            with self._lock:
                result = program.evaluate(activation)
        except Exception:
            return False, ""
        return (True, str(result)) if isinstance(result, str) else (False, "")

    def check(
        self, value: Any, schema: Any, *, old: Any = ABSENT, path: str = ""
    ) -> list[FieldError]:
        """Every failing rule in ``value``'s tree; old values pair by key (and list-map key)."""
        if not isinstance(schema, dict) or value is None:
            return []
        errors = self._check_node(value, schema, old=old, path=path)
        if isinstance(value, dict):
            properties = schema.get("properties") or {}
            additional = schema.get("additionalProperties")
            for key, item in value.items():
                if not path and key == "metadata":
                    continue
                sub = properties.get(key, additional if isinstance(additional, dict) else None)
                if isinstance(sub, dict):
                    errors += self.check(
                        item, sub, old=old_child(old, key), path=child_path(path, key)
                    )
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            previous = old_items(old, schema)
            for index, item in enumerate(value):
                errors += self.check(
                    item, schema["items"], old=previous(item), path=f"{path}[{index}]"
                )
        return errors
