"""Label and field selectors: parsing the query-string syntax and matching objects.

Label syntax as the apiserver accepts it: ``a=b``, ``a==b``, ``a!=b``,
``a in (x,y)``, ``a notin (x)``, ``a`` (exists), ``!a`` (does not exist),
``a>1`` / ``a<1``; terms joined by commas. Field selectors accept ``=``, ``==``
and ``!=`` on the fields a resource declares; anything else is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import bad_request
from .json_types import JsonObject, get_path

_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
_BINARY_TERM = re.compile(r"^([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*)$")


@dataclass(frozen=True)
class Requirement:
    """One label requirement; ``op`` is one of = != in notin exists !exists > <."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in (">", "<") and present and value is not None:
            try:
                number, bound = int(value), int(next(iter(self.values)))
            except ValueError:
                return False
            return number > bound if self.op == ">" else number < bound
        return False


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; empty matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        actual = labels or {}
        return all(requirement.matches(actual) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term.strip() for term in terms if term.strip()]


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key) or len(key) > 316:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    return key


def _check_value(value: str, text: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise bad_request(f"unable to parse requirement: invalid label value {value!r} in {text!r}")
    return value


def _parse_term(term: str, text: str) -> Requirement:
    if term.startswith("!"):
        return Requirement(_check_key(term[1:].strip(), text), "!exists")
    set_match = _SET_TERM.match(term)
    if set_match:
        key, op, raw_values = set_match.groups()
        values = [value.strip() for value in raw_values.split(",")]
        checked = frozenset(_check_value(value, text) for value in values)
        return Requirement(_check_key(key, text), op, checked)
    binary = _BINARY_TERM.match(term)
    if binary:
        key, op, value = binary.groups()
        normalized = "=" if op == "==" else op
        if normalized in (">", "<") and not value.strip().lstrip("-").isdigit():
            raise bad_request(f"unable to parse requirement: {term!r} needs an integer")
        return Requirement(
            _check_key(key, text), normalized, frozenset({_check_value(value, text)})
        )
    return Requirement(_check_key(term, text), "exists")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``?labelSelector=``; raises a 400 ApiError on bad syntax."""
    if not text:
        return LabelSelector()
    return LabelSelector(tuple(_parse_term(term, text) for term in _split_terms(text)))


def selector_from_object(selector: JsonObject | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions) as a LabelSelector."""
    if not selector:
        return LabelSelector()
    requirements = [
        Requirement(str(key), "=", frozenset({str(value)}))
        for key, value in sorted((selector.get("matchLabels") or {}).items())
    ]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expression in selector.get("matchExpressions") or []:
        op = operators.get(str(expression.get("operator")))
        if op is None:
            raise bad_request(f"invalid label selector operator {expression.get('operator')!r}")
        values = frozenset(str(value) for value in expression.get("values") or [])
        requirements.append(Requirement(str(expression.get("key")), op, values))
    return LabelSelector(tuple(requirements))


def selector_to_string(selector: JsonObject | None) -> str:
    """Render a ``metav1.LabelSelector`` the way ``Scale.status.selector`` shows it."""
    if not selector:
        return ""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = ",".join(sorted(str(value) for value in expression.get("values") or []))
        if operator == "In":
            parts.append(f"{key} in ({values})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif operator == "Exists":
            parts.append(str(key))
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field equalities/inequalities over declared field labels."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: JsonObject) -> bool:
        for requirement in self.requirements:
            actual = field_value(obj, requirement.field)
            if (actual == requirement.value) != requirement.equal:
                return False
        return True

    @property
    def empty(self) -> bool:
        return not self.requirements


_FIELD_ALIASES = {"source": "source.component"}


def field_value(obj: JsonObject, field: str) -> str:
    """The string form the apiserver compares a field selector against."""
    value: Any = get_path(obj, _FIELD_ALIASES.get(field, field))
    if value is None:
        return "false" if field == "spec.unschedulable" else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(text: str | None, supported: Iterable[str]) -> FieldSelector:
    """Parse ``?fieldSelector=``; unknown fields are a 400 like the real server."""
    if not text:
        return FieldSelector()
    allowed = set(supported)
    requirements = []
    for term in _split_terms(text):
        if "!=" in term:
            field, value = term.split("!=", 1)
            equal = False
        elif "==" in term:
            field, value = term.split("==", 1)
            equal = True
        elif "=" in term:
            field, value = term.split("=", 1)
            equal = True
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field = field.strip()
        if field not in allowed:
            raise bad_request(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, equal, value.strip()))
    return FieldSelector(tuple(requirements))
