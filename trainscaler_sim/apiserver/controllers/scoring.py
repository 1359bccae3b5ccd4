"""kube-scheduler profiles for the simulated scheduler: ``NodeResourcesFit`` scoring.

A ``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``, e.g.
``deploy/scheduler/kube-scheduler-config.yaml``) names profiles; each
profile's ``NodeResourcesFit`` ``scoringStrategy`` (``MostAllocated`` or
``LeastAllocated``, with per-resource weights) scores the feasible nodes the
way upstream's ``resourceAllocationScorer`` does:

* per configured resource with a non-zero allocatable, requested = what the
  node's bound pods request plus this pod, and
  ``MostAllocated``: ``requested * 100 // allocatable`` (capped at 100),
  ``LeastAllocated``: ``(allocatable - requested) * 100 // allocatable``
  (0 when requested exceeds allocatable);
* an extended resource (``nvidia.com/gpu``) the pod does not request is left
  out (upstream skips it rather than scoring it 0);
* node score = ``sum(score * weight) // sum(weight)``, integer arithmetic.

Every other default score plugin gives identical scores on identical,
untainted nodes without affinities, so the fit score alone orders them. Upstream
picks at random among the top-scoring nodes (``selectHost``); this simulation
takes the first by node name, so results are reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

MAX_NODE_SCORE = 100
_STRATEGIES = ("MostAllocated", "LeastAllocated")
# kube-scheduler's default NodeResourcesFit resources.
_DEFAULT_RESOURCES = (("cpu", 1), ("memory", 1))


@dataclass(frozen=True)
class FitScoring:
    """One profile's ``NodeResourcesFit`` scoring strategy."""

    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = _DEFAULT_RESOURCES

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise ValueError(f"scoringStrategy {self.strategy!r}: only {_STRATEGIES} are simulated")

    def score(
        self,
        *,
        allocatable: Mapping[str, Fraction],
        used: Mapping[str, Fraction],
        requests: Mapping[str, Fraction],
    ) -> int:
        total = weights = 0
        for resource, weight in self.resources:
            capacity = allocatable.get(resource, Fraction(0))
            wanted = requests.get(resource, Fraction(0))
            if capacity <= 0:
                continue
            if wanted <= 0 and resource not in ("cpu", "memory"):
                continue  # upstream: an extended resource the pod doesn't request is skipped
            # Upstream counts in integer units (milli-CPU, bytes, device counts).
            scale = 1000 if resource == "cpu" else 1
            capacity_units = int(capacity * scale)
            requested_units = int((used.get(resource, Fraction(0)) + wanted) * scale)
            total += self._resource_score(requested_units, capacity_units) * weight
            weights += weight
        return total // weights if weights else 0

    def _resource_score(self, requested: int, capacity: int) -> int:
        if self.strategy == "MostAllocated":
            return min(requested, capacity) * MAX_NODE_SCORE // capacity
        if requested > capacity:
            return 0
        return (capacity - requested) * MAX_NODE_SCORE // capacity


def profiles_from_config(path: str | Path) -> dict[str, FitScoring]:
    """schedulerName -> its fit scoring, from a ``KubeSchedulerConfiguration`` file."""
    document = yaml.safe_load(Path(path).read_text())
    if not isinstance(document, dict) or document.get("kind") != "KubeSchedulerConfiguration":
        raise ValueError(f"{path}: not a KubeSchedulerConfiguration")
    profiles: dict[str, FitScoring] = {}
    for profile in document.get("profiles") or [{}]:
        name = str(profile.get("schedulerName") or "default-scheduler")
        profiles[name] = _fit_scoring(profile)
    return profiles


def _fit_scoring(profile: Mapping[str, Any]) -> FitScoring:
    for plugin in profile.get("pluginConfig") or []:
        if plugin.get("name") != "NodeResourcesFit":
            continue
        strategy = (plugin.get("args") or {}).get("scoringStrategy") or {}
        resources = tuple(
            (str(r["name"]), int(r.get("weight", 1))) for r in strategy.get("resources") or []
        )
        return FitScoring(
            strategy=str(strategy.get("type") or "LeastAllocated"),
            resources=resources or _DEFAULT_RESOURCES,
        )
    return FitScoring()
