"""One-line explanations of connection failures, naming the setting to change.

Every message ends with whether a running embedded system was found (its
discovery file, ``workers.discovery``), since that is where settings come from
when nothing is exported.
"""

from __future__ import annotations

from pathlib import Path

from workers.client import ApiError
from workers.discovery import discovery_note
from workers.settings import Settings


def _note(settings: Settings) -> str:
    return discovery_note(Path(settings.discovery_file))


def api_unreachable(settings: Settings, url: str, *, error: Exception) -> str:
    return (
        f"cannot reach the API at {url} ({error}); set TRAINSCALER_API_URL or --api-url; "
        f"{_note(settings)}"
    )


def api_refused(settings: Settings, error: ApiError) -> str:
    if error.status in (401, 403):
        return (
            f"{error}; the API wants a valid bearer token: set TRAINSCALER_API_TOKEN or "
            f"--token; {_note(settings)}"
        )
    return str(error)


def redis_unreachable(settings: Settings, error: Exception) -> str:
    return (
        f"cannot reach Redis at {_redacted(settings.redis_url)} ({error}); set "
        f"TRAINSCALER_REDIS_URL; {_note(settings)}"
    )


def _redacted(url: str) -> str:
    """A Redis URL without its password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.partition(":")[0]
    return f"{scheme}://{user + ':' if user else ':'}***@{host}"
