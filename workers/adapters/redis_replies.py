"""Redis replies as text: a client built without ``decode_responses`` answers bytes.

The one place the adapters turn a reply (bytes, or str from a decoding client)
into text, so every reader decodes alike.
"""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def opt_text(value: Any) -> str | None:
    """``text``, with a missing key (None) kept as None."""
    return None if value is None else text(value)
