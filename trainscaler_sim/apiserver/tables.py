"""``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``: objects as ``meta.k8s.io/v1`` Tables.

What ``kubectl get`` asks for. Built-in kinds print through ``printers``;
custom resources print ``Name`` plus their CRD version's
``additionalPrinterColumns`` (JSONPath), or ``Name, Age`` when there are none,
as kube-apiserver's CRD table convertor does. Rows carry the object as
``PartialObjectMetadata`` unless ``includeObject`` says ``None`` or ``Object``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import bad_request
from .event_conversion import from_events_v1
from .json_types import JsonObject
from .printers import AGE, DEFAULT_PRINTER, NAME, PRINTERS, Cells, Column
from .resources import ResourceType
from .timefmt import human_age

_TABLE_VERSIONS = ("v1", "v1beta1")
_INCLUDE_OBJECT = ("None", "Metadata", "Object")


def wants_table(accept: str) -> str | None:
    """The meta.k8s.io version of Table the client prefers, if it asked for one first."""
    for entry in accept.split(","):
        parts = [part.strip() for part in entry.split(";")]
        if parts[0].lower() not in ("application/json", "*/*"):
            continue
        params = dict(part.split("=", 1) for part in parts[1:] if "=" in part)
        if not params.get("as"):
            return None  # plain JSON is acceptable at this preference: serve the object
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") in _TABLE_VERSIONS
        ):
            return params["v"]
    return None


# ----------------------------------------------------------------- JSONPath
_STEP = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-$]+)
      | \[(?P<index>-?\d+|\*)\]
      | \[\?\(@\.(?P<key>[A-Za-z0-9_.\-]+)\s*==\s*(?P<quote>["'])(?P<value>.*?)(?P=quote)\)\]""",
    re.VERBOSE,
)


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    steps, position = [], 0
    while position < len(text):
        matched = _STEP.match(text, position)
        if matched is None:
            raise bad_request(f"unsupported JSONPath {path!r}")
        steps.append(matched)
        position = matched.end()
    return steps


def _dotted(value: Any, key: str) -> Any:
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def jsonpath(obj: Any, path: str) -> list[Any]:
    """The values a simple JSONPath selects: fields, [n], [*] and [?(@.k=="v")]."""
    current = [obj]
    for step in _steps(path):
        following: list[Any] = []
        for value in current:
            if step.group("field") is not None:
                if isinstance(value, dict) and step.group("field") in value:
                    following.append(value[step.group("field")])
            elif step.group("index") is not None:
                if not isinstance(value, list):
                    continue
                if step.group("index") == "*":
                    following.extend(value)
                elif -len(value) <= int(step.group("index")) < len(value):
                    following.append(value[int(step.group("index"))])
            elif isinstance(value, list):
                wanted = step.group("value")
                following.extend(
                    item for item in value if str(_dotted(item, step.group("key"))) == wanted
                )
        current = following
    return current


def _cell(column_type: str, value: Any, *, now: datetime) -> Any:
    """kube's cellForJSONValue (and PrintResults for strings)."""
    if value is None:
        return None
    if column_type == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return str(value).lower()
        return (
            json.dumps(value, separators=(",", ":"))
            if isinstance(value, dict | list)
            else str(value)
        )
    if column_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        return human_age(value, now=now)
    return None


@dataclass(frozen=True)
class CustomPrinter:
    """A CRD version's printer columns."""

    columns: tuple[Column, ...]
    paths: tuple[str, ...]

    @classmethod
    def from_crd(cls, crd: JsonObject | None, version: str) -> CustomPrinter:
        entries: list[JsonObject] = []
        for entry in ((crd or {}).get("spec") or {}).get("versions") or []:
            if entry.get("name") == version:
                entries = list(entry.get("additionalPrinterColumns") or [])
        if not entries:
            return cls((NAME, AGE), (".metadata.creationTimestamp",))
        columns = tuple(
            Column(
                str(e.get("name", "")),
                str(e.get("type", "string")),
                priority=int(e.get("priority") or 0),
                format=str(e.get("format") or ""),
                description=str(e.get("description") or ""),
            )
            for e in entries
        )
        return cls((NAME, *columns), tuple(str(e.get("jsonPath", "")) for e in entries))

    def cells(self, obj: JsonObject, now: datetime) -> Cells:
        row: Cells = [str((obj.get("metadata") or {}).get("name", ""))]
        for column, path in zip(self.columns[1:], self.paths, strict=True):
            found = jsonpath(obj, path)
            row.append(_cell(column.type, found[0], now=now) if found else None)
        return row


class TableRenderer:
    """Renders lists, single objects and watch events of one resource type as Tables."""

    def __init__(
        self,
        resource_type: ResourceType,
        *,
        crd: JsonObject | None,
        include_object: str | None,
        version: str,
        now: datetime,
    ) -> None:
        include = include_object or "Metadata"
        if include not in _INCLUDE_OBJECT:
            raise bad_request(f"includeObject: Unsupported value: {include!r}")
        self._include = include
        self._version = version
        self._now = now
        self._events_v1 = resource_type.group == "events.k8s.io"
        self._columns: tuple[Column, ...]
        self._cells: Callable[[JsonObject, datetime], Cells]
        if resource_type.custom:
            custom = CustomPrinter.from_crd(crd, resource_type.version)
            self._columns, self._cells = custom.columns, custom.cells
        else:
            printer = PRINTERS.get((resource_type.group, resource_type.kind), DEFAULT_PRINTER)
            self._columns, self._cells = printer.columns, printer.cells

    def _row(self, obj: JsonObject) -> JsonObject:
        printed = from_events_v1(copy.deepcopy(obj)) if self._events_v1 else obj
        row: JsonObject = {"cells": self._cells(printed, self._now)}
        if self._include == "Object":
            row["object"] = obj
        elif self._include == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        return row

    def table(self, objects: list[JsonObject], *, list_meta: JsonObject) -> JsonObject:
        return {
            "kind": "Table",
            "apiVersion": f"meta.k8s.io/{self._version}",
            "metadata": list_meta,
            "columnDefinitions": [column.definition() for column in self._columns],
            "rows": [self._row(obj) for obj in objects],
        }

    def of_list(self, listed: JsonObject) -> JsonObject:
        return self.table(list(listed.get("items") or []), list_meta=listed.get("metadata") or {})

    def of_object(self, obj: JsonObject) -> JsonObject:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        return self.table([obj], list_meta={"resourceVersion": version} if version else {})

    def of_event(self, event_type: str, obj: JsonObject) -> JsonObject:
        """A watch event's object: one-row Tables, except BOOKMARK and ERROR objects."""
        if event_type in ("BOOKMARK", "ERROR"):
            return obj
        return self.of_object(obj)
