"""Identities in paths and queries, and the namespace scope, checked before any read.

Bodies are checked by the core's models (``scheduler_core.identity``); path
and query identities come here: a job named as ``namespace/name`` or a bare
name, a namespace as a DNS-1123 label. Invalid is a 422 naming the field;
outside ``TRAINSCALER_NAMESPACES`` is a 403 naming the field. Nothing is
recorded or enqueued for either.
"""

from __future__ import annotations

from fastapi import HTTPException, status
from fastapi.exceptions import RequestValidationError

from scheduler_core.identity import NAMESPACE_RULE, check_job_ref, is_namespace
from workers.settings import Settings


def _invalid(loc: tuple[str, ...], message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": loc, "msg": message, "type": "identity"}])


def require_job_ref(text: str, *, loc: tuple[str, ...]) -> None:
    try:
        check_job_ref(text)
    except ValueError as error:
        raise _invalid(loc, str(error)) from None


def require_namespace(text: str | None, *, loc: tuple[str, ...]) -> None:
    if text is not None and not is_namespace(text):
        raise _invalid(loc, f"must be {NAMESPACE_RULE}")


def require_scope(settings: Settings, namespace: str, *, field: str) -> None:
    if not settings.namespace_allowed(namespace):
        raise HTTPException(
            status_code=status.HTTP_403_FORBIDDEN,
            detail=f"{field}: namespace {namespace!r} is outside TRAINSCALER_NAMESPACES",
        )
