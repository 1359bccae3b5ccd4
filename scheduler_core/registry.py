"""The explicit registry of scaling policies, by name.

Each entry is a policy object with its own typed parameter and state models.
Runtime and simulator both resolve policies here, so the simulator runs
exactly the code production runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from scheduler_core.policies.base import (
    Policy,
    PolicyInput,
    PolicyParams,
    PolicyResult,
    PolicyState,
)
from scheduler_core.policies.edl import EdlPolicy
from scheduler_core.policies.goodput import GoodputPolicy
from scheduler_core.policies.static import StaticPolicy
from scheduler_core.policies.throughput import ThroughputPolicy
from scheduler_core.policies.tiresias import TiresiasPolicy

AnyPolicy = Policy[Any, Any]

POLICIES: Mapping[str, AnyPolicy] = MappingProxyType(
    {
        EdlPolicy.name: EdlPolicy(),
        ThroughputPolicy.name: ThroughputPolicy(),
        StaticPolicy.name: StaticPolicy(),
        TiresiasPolicy.name: TiresiasPolicy(),
        GoodputPolicy.name: GoodputPolicy(),
    }
)


class UnknownPolicyError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown policy {self.name!r}; known: {', '.join(sorted(POLICIES))}"


def get_policy(name: str) -> AnyPolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(name) from None


def policy_names() -> list[str]:
    return sorted(POLICIES)


def parse_params(name: str, raw: Mapping[str, Any] | None = None) -> PolicyParams:
    """Validate a policy's parameters from plain JSON data."""
    params: PolicyParams = get_policy(name).params_type.model_validate(dict(raw or {}))
    return params


def load_state(name: str, raw: str | bytes | None) -> PolicyState:
    """A policy's state from its JSON form; a fresh state when there is none."""
    state_type = get_policy(name).state_type
    if not raw:
        return state_type()  # type: ignore[no-any-return]
    try:
        return state_type.model_validate_json(raw)  # type: ignore[no-any-return]
    except ValidationError as error:
        raise ValueError(f"stored state of policy {name!r} is not valid: {error}") from error


def decide(
    name: str,
    request: PolicyInput,
    *,
    state: PolicyState | None = None,
    params: PolicyParams | Mapping[str, Any] | None = None,
) -> PolicyResult[Any]:
    """Run policy ``name`` once: the single entry point runtime and simulator share."""
    policy = get_policy(name)
    typed_params = params if isinstance(params, PolicyParams) else parse_params(name, params)
    typed_state = state if state is not None else policy.state_type()
    return policy.decide(request, typed_state, params=typed_params)
