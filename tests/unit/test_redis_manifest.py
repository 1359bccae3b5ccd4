"""deploy/redis.yaml bounds Redis's memory without ever evicting a key (issue 16, Deliver 3)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "redis.yaml"
UNITS = {"kb": 1000, "mb": 1000**2, "gb": 1000**3}
LIMIT_UNITS = {"Mi": 1024**2, "Gi": 1024**3}


def _redis_container() -> dict[str, object]:
    for document in yaml.safe_load_all(MANIFEST.read_text()):
        if document and document.get("kind") == "StatefulSet":
            container: dict[str, object] = document["spec"]["template"]["spec"]["containers"][0]
            return container
    raise AssertionError("no StatefulSet in deploy/redis.yaml")


def test_maxmemory_with_noeviction_below_the_container_limit() -> None:
    container = _redis_container()
    command = " ".join(str(a) for a in container["args"])  # type: ignore[attr-defined]
    assert re.search(r"--maxmemory-policy noeviction\b", command), command
    bound = re.search(r"--maxmemory (\d+)(kb|mb|gb)\b", command)
    assert bound is not None, command
    maxmemory = int(bound.group(1)) * UNITS[bound.group(2)]
    limit = container["resources"]["limits"]["memory"]  # type: ignore[index]
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", str(limit)).groups()  # type: ignore[union-attr]
    # Room above maxmemory for the AOF rewrite's copy-on-write and the client buffers.
    assert maxmemory <= 0.7 * int(number) * LIMIT_UNITS[unit]
