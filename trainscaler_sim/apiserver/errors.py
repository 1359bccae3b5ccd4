"""Kubernetes API errors and the ``Status`` bodies the apiserver answers them with."""

from __future__ import annotations

from .json_types import JsonObject

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the server answers with a ``Status`` object and an HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: JsonObject | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status_body(self) -> JsonObject:
        body: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(group_resource: str, name: str) -> JsonObject:
    plural, _, group = group_resource.partition(".")
    details: JsonObject = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(group_resource: str, name: str) -> ApiError:
    return ApiError(
        404, f'{group_resource} "{name}" not found', details=_details(group_resource, name)
    )


def already_exists(group_resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{group_resource} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(group_resource, name),
    )


def conflict(group_resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {group_resource} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        details=_details(group_resource, name),
    )


def invalid(kind: str, name: str, *, cause: str) -> ApiError:
    return ApiError(
        422, f'{kind} "{name}" is invalid: {cause}', details={"name": name, "kind": kind}
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def expired(message: str) -> ApiError:
    """410 Gone with reason Expired, as for too-old watch/list resource versions."""
    return ApiError(410, message, reason="Expired")


def status_success(group_resource: str, name: str, *, uid: str) -> JsonObject:
    details = _details(group_resource, name)
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
