"""How trainscaler names its Redis keys: one prefix that carries one hash tag.

Every key the runtime writes is ``prefix + suffix`` (``Settings.redis_key_prefix``,
default ``{trainscaler}:``). Redis Cluster hashes only the part of a key between
the first ``{`` and the next ``}`` when that part is not empty (the cluster
spec's "hash tags"), so with the tag in the prefix every key lands in one slot:
multi-key commands, MULTI/EXEC and the Lua scripts (which take all their keys
through ``KEYS``) then run unchanged on Redis Cluster and on proxies that
route by slot. Sharding the runtime's own keys across slots is given up for
that; the broker and result backend use their own keys.
"""

from __future__ import annotations

from typing import Final

DEFAULT_KEY_PREFIX: Final = "{trainscaler}:"


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes, when it has a hash tag; else None."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def check_key_prefix(prefix: str) -> str:
    """``prefix`` when it carries a hash tag; ``ValueError`` naming the rule otherwise."""
    if hash_tag(prefix) is None:
        raise ValueError(
            f"Redis key prefix {prefix!r} has no hash tag: it must contain '{{tag}}' "
            f"(e.g. {DEFAULT_KEY_PREFIX!r}) so all of trainscaler's keys share one "
            "Redis Cluster slot"
        )
    return prefix
