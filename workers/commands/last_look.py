"""What ``trainscaler status`` saw last time, so it can say what is new since.

A small JSON file beside the discovery file (per user): for each API URL, the
time of the newest dead letter seen. Dead letters are a bounded list, so their
count may stay the same while new ones arrive; their times do not.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

LAST_LOOK_FILE = "status-last-look.json"


class LastLook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}

    def new_since(self, source: str, newest_times: Sequence[float]) -> int:
        """How many of ``newest_times`` are newer than the last look; remembers this look."""
        seen = self._read()
        before = seen.get(source, float("-inf"))
        new = sum(1 for at in newest_times if at > before)
        if newest_times:
            seen[source] = max(max(newest_times), before)
            self._write(seen)
        return new

    def _write(self, seen: dict[str, float]) -> None:
        with suppress(OSError):  # a read-only home only loses the "since" part
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".last-look-")
            with os.fdopen(descriptor, "w") as handle:
                handle.write(json.dumps(seen))
            os.replace(temporary, self.path)
