"""What the scaler writes into an ElasticJob's ``status``: pure functions.

Fields (the issue's list): ``currentReplicas``, ``desiredReplicas``,
``lastScaleTime``, ``lastDecision{policy, rule, reason}``,
``observedGeneration`` and the conditions ``Ready``, ``ScalingActive`` and
``ScalingLimited`` (HPA's condition names and reasons where they apply).
A condition's ``lastTransitionTime`` moves only when its status changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# EDL planner's "why it could not grow" values that mean cluster capacity.
CAPACITY_LIMITS = frozenset({"memory_free", "memory_cap", "no_node_fits", "cpu_cap", "gpu_cap"})
AT_MAX = "at_max"


def rfc3339(seconds: float) -> str:
    """Kubernetes' timestamp format (second precision, UTC, ``Z``)."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Limit:
    """Why the replica count is not what the planner would like, if it is limited."""

    reason: str
    message: str


def replica_limit(
    *,
    requested: int,
    min_replicas: int,
    max_replicas: int,
    limited_by: str | None,
) -> Limit | None:
    """HPA's ``ScalingLimited`` reasons: by max, by min, or by cluster capacity."""
    if requested > max_replicas:
        return Limit("TooManyReplicas", f"desired {requested} capped at maxReplicas {max_replicas}")
    if limited_by == AT_MAX and requested >= max_replicas:
        # The planner would grow it further; the range stops it (not a cap of a bigger count).
        return Limit("TooManyReplicas", f"at maxReplicas {max_replicas}; the planner wants more")
    if 0 < requested < min_replicas:  # 0: a preemption, not raised
        return Limit("TooFewReplicas", f"desired {requested} raised to minReplicas {min_replicas}")
    if limited_by in CAPACITY_LIMITS:
        return Limit("InsufficientCapacity", f"cannot grow beyond {requested}: {limited_by}")
    return None


def scaling_conditions(
    *,
    target: str,
    current: int,
    limit: Limit | None,
    failure: str | None = None,
) -> list[Condition]:
    ready = Condition("Ready", "True", "TargetFound", f"{target} has {current} replicas")
    if failure is not None:
        active = Condition("ScalingActive", "False", "FailedUpdateScale", failure)
    else:
        active = Condition("ScalingActive", "True", "SucceededRescale", "scale target updated")
    if limit is None:
        limited = Condition(
            "ScalingLimited",
            "False",
            "DesiredWithinRange",
            "the desired count is within the acceptable range",
        )
    else:
        limited = Condition("ScalingLimited", "True", limit.reason, limit.message)
    return [ready, active, limited]


def merge_conditions(
    previous: Sequence[Mapping[str, Any]],
    conditions: Sequence[Condition],
    *,
    now: str,
    generation: int,
) -> list[dict[str, Any]]:
    """New conditions, keeping ``lastTransitionTime`` where the status did not change."""
    before = {str(c.get("type")): c for c in previous}
    merged: list[dict[str, Any]] = []
    for condition in conditions:
        old = before.get(condition.type)
        unchanged = old is not None and old.get("status") == condition.status
        merged.append(
            {
                "type": condition.type,
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
                "lastTransitionTime": (
                    str(old.get("lastTransitionTime")) if unchanged and old else now
                ),
                "observedGeneration": generation,
            }
        )
    return merged


@dataclass(frozen=True)
class Decision:
    policy: str
    rule: str
    reason: str


def next_status(
    previous: Mapping[str, Any],
    *,
    current: int,
    desired: int,
    decision: Decision,
    conditions: Sequence[Condition],
    generation: int,
    now: float,
    scaled: bool,
) -> dict[str, Any]:
    """The status to write; ``lastScaleTime`` moves only when replicas changed."""
    timestamp = rfc3339(now)
    status: dict[str, Any] = {
        "currentReplicas": current,
        "desiredReplicas": desired,
        "lastDecision": {
            "policy": decision.policy,
            "rule": decision.rule,
            "reason": decision.reason,
        },
        "observedGeneration": generation,
        "conditions": merge_conditions(
            previous.get("conditions") or [], conditions, now=timestamp, generation=generation
        ),
    }
    last_scale = timestamp if scaled else previous.get("lastScaleTime")
    if last_scale:
        status["lastScaleTime"] = last_scale
    return status
