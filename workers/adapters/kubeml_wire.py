"""KubeML's JSON on the wire: its structs decoded as Go's ``encoding/json`` does,
and trainscaler's models written back under KubeML's JSON names.

KubeML's components exchange Go structs (repository DiegoStock12/kubeml,
``ml/pkg/api/types.go``): ``TrainRequest`` (with ``TrainOptions``),
``TrainTask`` (``{"request": ..., "job": {"id": ..., "state": ...}}``),
``JobState`` and ``InferRequest``. Their handlers read bodies with
``json.Unmarshal`` into those structs, so this module decodes the same way:

* unknown keys are ignored; missing keys and ``null`` leave the Go zero value
  (``""``, ``0``, ``false``, an empty struct);
* keys match field names exactly or, failing that, case-insensitively; a later
  duplicate key wins (``null`` leaves the earlier value in place);
* a value of the wrong JSON type is an error (``"64"`` or ``64.5`` into an
  ``int``, ``5`` into a struct); ints are 64-bit, ``lr`` is a ``float32``;
* ``NaN``/``Infinity`` literals, trailing data, an empty body and anything but
  an object or ``null`` at the top are errors; invalid UTF-8 and lone UTF-16
  surrogates in strings become U+FFFD.

``GoDecodeError`` is what ``json.Unmarshal`` would have returned; KubeML's
handlers answer it with 500. The decoded value is plain data (dicts of Go
values); the API converts it into trainscaler's models, which validate.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler_core.models import TrainRequest

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The largest finite float32; ParseFloat(s, 32) reports anything rounding past it as a range error.
FLOAT32_MAX = 3.4028234663852886e38
_SURROGATE = re.compile("[\ud800-\udfff]")


class GoDecodeError(ValueError):
    """``json.Unmarshal`` would have failed on this body."""


@dataclass(frozen=True)
class GoType:
    """A Go type as ``encoding/json`` sees it: a scalar kind, a struct or a slice."""

    kind: str  # "string" | "int" | "float32" | "float64" | "bool" | "struct" | "slice" | "any" | "object"
    name: str = ""
    fields: dict[str, GoType] = field(default_factory=dict)
    element: GoType | None = None


STRING = GoType("string")
INT = GoType("int")
FLOAT32 = GoType("float32")
FLOAT64 = GoType("float64")
BOOL = GoType("bool")
ANY = GoType("any")
# A struct this module does not model field by field (KubeML's corev1.Pod and
# corev1.Service pointers): an object or null.
OPAQUE_OBJECT = GoType("object")

# ml/pkg/api/types.go
TRAIN_OPTIONS = GoType(
    "struct",
    "TrainOptions",
    {
        "default_parallelism": INT,
        "static_parallelism": BOOL,
        "validate_every": INT,
        "k": INT,
        "goal_accuracy": FLOAT64,
    },
)
TRAIN_REQUEST = GoType(
    "struct",
    "TrainRequest",
    {
        "model_type": STRING,
        "batch_size": INT,
        "epochs": INT,
        "dataset": STRING,
        "lr": FLOAT32,
        "function_name": STRING,
        "options": TRAIN_OPTIONS,
    },
)
JOB_STATE = GoType("struct", "JobState", {"parallelism": INT, "elapsed_time": FLOAT64})
# JobInfo's Channel field is tagged json:"-": never on the wire.
JOB_INFO = GoType(
    "struct",
    "JobInfo",
    {"id": STRING, "state": JOB_STATE, "pod": OPAQUE_OBJECT, "svc": OPAQUE_OBJECT},
)
TRAIN_TASK = GoType("struct", "TrainTask", {"request": TRAIN_REQUEST, "job": JOB_INFO})
INFER_REQUEST = GoType(
    "struct", "InferRequest", {"model_id": STRING, "data": GoType("slice", element=ANY)}
)


def zero(go_type: GoType) -> Any:
    """Go's zero value of ``go_type``."""
    if go_type.kind == "struct":
        return {name: zero(t) for name, t in go_type.fields.items()}
    return {
        "string": "",
        "int": 0,
        "float32": 0.0,
        "float64": 0.0,
        "bool": False,
    }.get(go_type.kind)


class _Pairs(list[tuple[str, Any]]):
    """A decoded JSON object, its (key, value) pairs in order (duplicates kept)."""


class _IntLiteral(str):
    """An integer literal, kept as text: Go converts a number only for a field it
    decodes into (an unknown key's value is skipped, however long)."""

    def number(self) -> Decimal:
        return Decimal(self)


def _reject_constant(name: str) -> Any:
    raise GoDecodeError(f"invalid character {name[0]!r} looking for beginning of value")


def decode(body: bytes, go_type: GoType) -> dict[str, Any]:
    """``json.Unmarshal(body, &value)`` for a struct ``go_type``; raises ``GoDecodeError``."""
    text = body.decode("utf-8", errors="replace")
    try:
        raw = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_float=Decimal,
            parse_int=_IntLiteral,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as error:
        raise GoDecodeError(f"invalid JSON: {error.msg}") from None
    except RecursionError:
        raise GoDecodeError("exceeded max depth") from None
    value: dict[str, Any] = zero(go_type)
    if raw is None:
        return value
    try:
        decoded: dict[str, Any] = _into(raw, go_type, current=value, where=go_type.name)
    except RecursionError:
        raise GoDecodeError("exceeded max depth") from None
    return decoded


def _type_error(raw: Any, go_type: GoType, *, where: str) -> GoDecodeError:
    kinds = {
        list: "array",
        str: "string",
        bool: "bool",
        _IntLiteral: "number",
        Decimal: "number",
    }
    found = "object" if _is_object(raw) else kinds.get(type(raw), "value")
    target = go_type.name or go_type.kind
    return GoDecodeError(f"json: cannot unmarshal {found} into Go value {where} of type {target}")


def _is_object(raw: Any) -> bool:
    return isinstance(raw, _Pairs)


def _into(raw: Any, go_type: GoType, *, current: Any, where: str) -> Any:
    if raw is None:
        return current  # Go: null leaves a non-pointer value as it was
    kind = go_type.kind
    if kind == "struct":
        if not _is_object(raw):
            raise _type_error(raw, go_type, where=where)
        result = dict(current) if isinstance(current, dict) else zero(go_type)
        for key, value in raw:
            name = _field_for(key, go_type)
            if name is not None:
                result[name] = _into(
                    value, go_type.fields[name], current=result[name], where=f"{where}.{name}"
                )
        return result
    if kind == "object":
        if not _is_object(raw):
            raise _type_error(raw, go_type, where=where)
        return _plain(raw)
    if kind == "slice":
        if not isinstance(raw, list) or _is_object(raw):
            raise _type_error(raw, go_type, where=where)
        return [_plain(item) for item in raw]
    if kind == "any":
        return _plain(raw)
    if kind == "string":
        if type(raw) is not str:
            raise _type_error(raw, go_type, where=where)
        return _SURROGATE.sub("\ufffd", raw)
    if kind == "bool":
        if not isinstance(raw, bool):
            raise _type_error(raw, go_type, where=where)
        return raw
    if not isinstance(raw, _IntLiteral | Decimal):
        raise _type_error(raw, go_type, where=where)
    if kind == "int":
        # strconv.ParseInt: integer literals only (no "1.0", no "1e2"), 64 bits.
        value = raw.number() if isinstance(raw, _IntLiteral) else None
        if value is None or not INT64_MIN <= value <= INT64_MAX:
            raise GoDecodeError(f"json: cannot unmarshal number into Go value {where} of type int")
        return int(value)
    return _float(raw, kind, where=where)


def _float(raw: _IntLiteral | Decimal, kind: str, *, where: str) -> float:
    """strconv.ParseFloat at 32 or 64 bits: a value past the largest finite one is an error."""
    number = float(raw.number() if isinstance(raw, _IntLiteral) else raw)
    limit = FLOAT32_MAX if kind == "float32" else sys.float_info.max
    if not abs(number) <= limit:
        raise GoDecodeError(f"json: cannot unmarshal number into Go value {where} of type {kind}")
    return number


def _field_for(key: str, go_type: GoType) -> str | None:
    """Go's field lookup: the exact name first, then a case-insensitive match."""
    if key in go_type.fields:
        return key
    folded = key.casefold()
    return next((name for name in go_type.fields if name.casefold() == folded), None)


def _plain(raw: Any) -> Any:
    """An ``interface{}`` value: objects as dicts (last duplicate wins), numbers as floats."""
    if _is_object(raw):
        return {key: _plain(value) for key, value in raw}
    if isinstance(raw, list):
        return [_plain(item) for item in raw]
    if isinstance(raw, _IntLiteral | Decimal):
        return _float(raw, "float64", where="interface {}")
    if isinstance(raw, str):
        return _SURROGATE.sub("\ufffd", raw)
    return raw


# --- trainscaler's models under KubeML's names --------------------------------------


def train_request_json(request: TrainRequest) -> dict[str, Any]:
    """A ``TrainRequest`` as KubeML's JSON (``lr``, ``options``); trainscaler's own
    fields (namespace, replica bounds, ps_url) are not KubeML's and stay out."""
    options = request.options
    return {
        "model_type": request.model_type,
        "batch_size": request.batch_size,
        "epochs": request.epochs,
        "dataset": request.dataset,
        "lr": request.learning_rate,
        "function_name": request.function_name,
        "options": {
            "default_parallelism": options.default_parallelism,
            "static_parallelism": options.static_parallelism,
            "validate_every": options.validate_every,
            "k": options.k,
            "goal_accuracy": options.goal_accuracy,
        },
    }


def job_state_json(*, parallelism: int, elapsed_time: float | None) -> dict[str, Any]:
    """KubeML ``JobState``: what the scheduler posts to the PS's ``/update/{id}``."""
    return {"parallelism": parallelism, "elapsed_time": elapsed_time or 0.0}


def train_task_json(
    request: TrainRequest, *, job_id: str, parallelism: int, elapsed_time: float | None
) -> dict[str, Any]:
    """KubeML ``TrainTask``: what the scheduler posts to the PS's ``/start``."""
    return {
        "request": train_request_json(request),
        "job": {
            "id": job_id,
            "state": job_state_json(parallelism=parallelism, elapsed_time=elapsed_time),
        },
    }
