"""Log shapes: one JSON object per line, or readable text, both with the context."""

from __future__ import annotations

import io
import json
import logging

from workers.observability.logs import configure_logging
from workers.settings import Settings


def _emit(log_format: str) -> str:
    stream = io.StringIO()
    handler = configure_logging(Settings(log_format=log_format), stream=stream)
    try:
        logging.getLogger("workers.test").info(
            "scaled %s", "ml/bert", extra={"job": "ml/bert", "reason": "edl.up: room", "target": 4}
        )
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("workers.test").exception("failed", extra={"job": "ml/x"})
    finally:
        logging.getLogger().removeHandler(handler)
    return stream.getvalue()


def test_json_lines_carry_the_job_and_the_reason() -> None:
    first, second = (
        json.loads(line) for line in _emit("json").splitlines() if line.startswith("{")
    )
    assert first["message"] == "scaled ml/bert" and first["level"] == "INFO"
    assert first["job"] == "ml/bert" and first["reason"] == "edl.up: room" and first["target"] == 4
    assert first["logger"] == "workers.test" and first["ts"].endswith("+00:00")
    assert second["job"] == "ml/x" and "ValueError: boom" in second["exception"]


def test_text_lines_are_readable_with_the_context() -> None:
    text = _emit("text")
    first = text.splitlines()[0]
    assert "INFO" in first and "workers.test: scaled ml/bert" in first
    assert first.endswith("job=ml/bert reason=edl.up: room target=4")
    assert "ValueError: boom" in text


def test_configuring_twice_keeps_one_handler() -> None:
    root = logging.getLogger()
    before = len(root.handlers)
    first = configure_logging(Settings(), stream=io.StringIO())
    second = configure_logging(Settings(), stream=io.StringIO())
    try:
        assert first not in root.handlers and second in root.handlers
        assert len(root.handlers) == before + 1
    finally:
        root.removeHandler(second)
