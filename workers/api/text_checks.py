"""Text the runtime can store: JSON may carry lone UTF-16 surrogates (``"\\ud800"``).

Python decodes them into ``str`` values that no UTF-8 encoder accepts, so
Redis and Celery would fail on them later (a 500). Routes check their input
here first and answer 422 naming the field instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

MESSAGE = "text must be valid UTF-8 (it has a lone surrogate)"


def _bad_text(value: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            yield loc
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _bad_text(key, loc)
            yield from _bad_text(item, (*loc, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _bad_text(item, (*loc, index))


def require_utf8(**values: Any) -> None:
    """Raise a 422 for every field (model field, path or query value) with unencodable text.

    Keyword names are the location: ``require_utf8(body=model, path=task_id)``.
    """
    problems: list[dict[str, Any]] = []
    for where, value in values.items():
        data = value.model_dump(mode="python") if isinstance(value, BaseModel) else value
        problems.extend(
            {"loc": loc, "msg": MESSAGE, "type": "string_unicode"}
            for loc in _bad_text(data, (where,))
        )
    if problems:
        raise RequestValidationError(problems)
