"""Bearer-token authentication of the API.

The token comes from ``Settings.api_token`` (``TRAINSCALER_API_TOKEN``). It
is required unless ``Settings.api_auth_disabled`` is true (local use only):
an API configured with neither refuses to start. ``/health`` (the
readiness probe) and ``/metrics`` (the Prometheus scrape) stay open; they
show no job payloads.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from workers.api.context import ApiContext, context
from workers.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="TRAINSCALER_API_TOKEN")


class ApiConfigError(ValueError):
    """The API's settings do not allow it to start safely."""


def check_auth_settings(settings: Settings) -> None:
    if settings.api_auth_disabled:
        return
    if not settings.api_token:
        raise ApiConfigError(
            "the API needs a bearer token: set TRAINSCALER_API_TOKEN, or "
            "TRAINSCALER_API_AUTH_DISABLED=true for local use"
        )


def require_token(
    ctx: Annotated[ApiContext, Depends(context)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Dependency of every protected route: 401 without the configured token."""
    settings = ctx.settings
    if settings.api_auth_disabled:
        return
    expected = settings.api_token or ""
    given = credentials.credentials if credentials is not None else ""
    # Constant-time comparison: the token must not leak through timing.
    if not given or not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or invalid bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
