"""The API's error shapes: every error is JSON with a one-line ``detail``.

* 422: ``detail`` lists each invalid field (``loc``, ``msg``, ``type``) and
  ``fields`` names them (``body.batch_size``); the input is not echoed back.
* 503: Redis or the Celery broker did not answer; ``detail`` names which.
* Other ``HTTPException``s keep their status and detail.
"""

from __future__ import annotations

import logging

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


def _loc(loc: object) -> list[str | int]:
    if not isinstance(loc, list | tuple):
        return [str(loc)]
    return [part if isinstance(part, int) else str(part) for part in loc]


async def validation_error(request: Request, error: Exception) -> JSONResponse:
    problems = error.errors() if isinstance(error, RequestValidationError) else []
    detail = [
        {
            "loc": _loc(problem.get("loc", ())),
            "msg": str(problem.get("msg", "invalid")),
            "type": str(problem.get("type", "value_error")),
        }
        for problem in problems
    ]
    fields = sorted({".".join(str(p) for p in item["loc"]) for item in detail})
    return JSONResponse(status_code=422, content={"detail": detail, "fields": fields})


async def http_error(request: Request, error: Exception) -> JSONResponse:
    if not isinstance(error, StarletteHTTPException):
        raise error
    return JSONResponse(
        status_code=error.status_code,
        content={"detail": error.detail},
        headers=dict(error.headers or {}),
    )


async def redis_error(request: Request, error: Exception) -> JSONResponse:
    log.warning("redis unavailable: %s", error)
    return JSONResponse(status_code=503, content={"detail": f"redis unavailable: {error}"})


async def broker_error(request: Request, error: Exception) -> JSONResponse:
    log.warning("celery broker unavailable: %s", error)
    return JSONResponse(status_code=503, content={"detail": f"celery broker unavailable: {error}"})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(redis.RedisError, redis_error)
    app.add_exception_handler(OperationalError, broker_error)
