"""Log setup for every trainscaler process: JSON lines or readable text.

``Settings.log_format`` (``TRAINSCALER_LOG_FORMAT``) picks the shape:
``json`` writes one JSON object per line (deployments: the log pipeline
parses it), ``text`` writes readable lines (the terminal). Both carry the
context a record was given through ``extra=``: the job, the decision reason,
the policy, the request id, so ``log.info("scaled", extra={"job": j,
"reason": r})`` is searchable either way.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from workers.settings import Settings

# Context keys worth carrying when a record has them (passed through ``extra=``).
CONTEXT_FIELDS = (
    "job",
    "reason",
    "policy",
    "target",
    "generation",
    "request_id",
    "task",
    "method",
    "path",
    "status",
    "duration_ms",
)


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {
        name: getattr(record, name)
        for name in CONTEXT_FIELDS
        if getattr(record, name, None) is not None
    }


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and context."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_context(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` for people reading a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _context(record)
        if context:
            line += " " + " ".join(f"{k}={v}" for k, v in context.items())
        return line


def build_handler(settings: Settings, *, stream: TextIO | None = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    formatter: logging.Formatter = (
        JsonLineFormatter() if settings.log_format == "json" else TextFormatter()
    )
    handler.setFormatter(formatter)
    return handler


def configure_logging(settings: Settings, *, stream: TextIO | None = None) -> logging.Handler:
    """Route the root logger through one handler of the configured shape.

    Replaces handlers an earlier call installed (so calling twice is safe) and
    returns the new handler.
    """
    root = logging.getLogger()
    for existing in list(root.handlers):
        if getattr(existing, "_trainscaler", False):
            root.removeHandler(existing)
    handler = build_handler(settings, stream=stream)
    handler._trainscaler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    return handler
