"""Per-(verb, resource) request counting and deterministic fault injection."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


class RequestCounter:
    """Counts client requests by (verb, resource), e.g. ("patch", "deployments/scale")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def record(self, verb: str, resource: str) -> None:
        with self._lock:
            self._counts[(verb, resource)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


@dataclass(frozen=True)
class FaultRule:
    """Which requests fail: ``verb``/``resource`` None match anything; a resource
    without "/" also matches its subresources ("deployments" covers "deployments/scale")."""

    verb: str | None
    resource: str | None
    rate: float
    codes: tuple[int, ...]

    def applies_to(self, verb: str, resource: str) -> bool:
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is None or self.resource == resource:
            return True
        return "/" not in self.resource and resource.split("/", 1)[0] == self.resource


class FaultInjector:
    """Answers a seeded-random fraction of matching requests with error codes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rule: FaultRule | None = None
        self._random = random.Random(0)

    def configure(
        self,
        *,
        verb: str | None,
        rate: float,
        codes: Iterable[int],
        seed: int,
        resource: str | None,
    ) -> None:
        chosen = tuple(codes)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be within [0, 1], got {rate}")
        if rate > 0 and not chosen:
            raise ValueError("fault injection needs at least one status code")
        with self._lock:
            self._rule = FaultRule(verb, resource, rate, chosen) if rate > 0 else None
            self._random = random.Random(seed)

    def pick(self, verb: str, resource: str) -> int | None:
        """The code to fail this request with, or None to serve it."""
        with self._lock:
            rule = self._rule
            if rule is None or not rule.applies_to(verb, resource):
                return None
            if self._random.random() >= rule.rate:
                return None
            return self._random.choice(rule.codes)
