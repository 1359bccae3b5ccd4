"""The environment of a child process: the parent's, with the settings replaced.

Children are configured only through ``TRAINSCALER_*`` variables, read by
their own ``Settings``. Every inherited ``TRAINSCALER_*`` variable is dropped
first, so a child sees exactly the settings the parent hands it, each field
written in the form pydantic-settings parses back (JSON for non-strings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PREFIX = "TRAINSCALER_"


def settings_env(values: Mapping[str, Any], *, prefix: str = PREFIX) -> dict[str, str]:
    """``{"redis_url": "redis://..."}`` -> ``{"TRAINSCALER_REDIS_URL": "redis://..."}``.

    ``None`` values are left out (the field's default, None, applies).
    """
    env: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        env[f"{prefix}{name.upper()}"] = text
    return env


def child_env(
    inherited: Mapping[str, str],
    settings: Mapping[str, Any],
    *,
    extra: Mapping[str, str] | None = None,
    prefix: str = PREFIX,
) -> dict[str, str]:
    """``inherited`` without ``prefix`` variables, plus ``settings`` and ``extra``."""
    env = {k: v for k, v in inherited.items() if not k.startswith(prefix)}
    env.update(settings_env(settings, prefix=prefix))
    env.update(extra or {})
    return env
