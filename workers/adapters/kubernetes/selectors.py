"""Label selectors, matched the way the API server matches them.

Two shapes reach the adapter: the structured ``LabelSelector`` of a workload's
``spec.selector`` (``matchLabels`` + ``matchExpressions``) and the string form
a ``Scale`` reports in ``status.selector`` (``a=b,c!=d,e in (x,y),!f``). Both
become one ``Selector`` so a target's pods are found from the cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """A selector the API server would reject."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...]
    # Kubernetes: a null selector matches nothing, an empty one matches everything.
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        present = labels or {}
        return all(r.matches(present) for r in self.requirements)


NOTHING = Selector((), matches_nothing=True)

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def from_label_selector(selector: Mapping[str, Any] | None) -> Selector:
    """A structured ``LabelSelector``; ``None`` matches nothing."""
    if selector is None:
        return NOTHING
    requirements = [
        Requirement(str(key), "In", frozenset({str(value)}))
        for key, value in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = expression.get("operator")
        if operator not in _OPERATORS:
            raise SelectorError(f"unknown selector operator {operator!r}")
        values = frozenset(str(v) for v in expression.get("values") or [])
        requirements.append(Requirement(str(expression.get("key")), operator, values))
    return Selector(tuple(requirements))


_SET_TERM = re.compile(r"^\s*(!)?\s*([^\s!=(),]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQUALITY_TERM = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside ``( ... )``."""
    terms: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in terms if t.strip()]


def parse_selector(text: str | None) -> Selector:
    """The string form (``kubectl -l``); empty matches everything, None nothing."""
    if text is None:
        return NOTHING
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        equality = _EQUALITY_TERM.match(term)
        if equality:
            key, operator, value = equality.groups()
            requirements.append(
                Requirement(key, "NotIn" if operator == "!=" else "In", frozenset({value}))
            )
            continue
        set_term = _SET_TERM.match(term)
        if not set_term:
            raise SelectorError(f"cannot parse label selector term {term!r}")
        negated, key, operator, values = set_term.groups()
        if operator:
            if negated:
                raise SelectorError(f"cannot negate a set term: {term!r}")
            parsed = frozenset(v.strip() for v in values.split(",") if v.strip())
            requirements.append(Requirement(key, "In" if operator == "in" else "NotIn", parsed))
        else:
            requirements.append(Requirement(key, "DoesNotExist" if negated else "Exists"))
    return Selector(tuple(requirements))
