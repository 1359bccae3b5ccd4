"""The one interface every scaling policy implements.

A policy is a pure function object: jobs, the cluster snapshot, new epoch
reports and the injected time go in together with the policy's own state; a
``ScalingPlan`` and the new state come out. State is a pydantic model so the
runtime can keep it in Redis as JSON and several worker processes can share
it; a policy never keeps anything in process memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.models import ClusterResource, ElasticJob, EpochReport, ScalingPlan


class PolicyInput(BaseModel):
    """Everything a policy may look at for one decision round."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    jobs: tuple[ElasticJob, ...] = ()
    cluster: ClusterResource = ClusterResource()
    reports: tuple[EpochReport, ...] = ()
    # Seconds on the caller's clock (injected; the core never reads a clock).
    now: float = 0.0


class PolicyParams(BaseModel):
    """Base of every policy's typed parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class PolicyState(BaseModel):
    """Base of every policy's state; must round-trip through JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class EmptyState(PolicyState):
    """State of a stateless policy."""


ParamsT = TypeVar("ParamsT", bound=PolicyParams)
StateT = TypeVar("StateT", bound=PolicyState)


@dataclass(frozen=True)
class PolicyResult(Generic[StateT]):
    plan: ScalingPlan
    state: StateT


class Policy(Protocol[ParamsT, StateT]):
    """A scaling policy: ``decide(input, state, *, params) -> (plan, new state)``."""

    name: ClassVar[str]
    params_type: type[ParamsT]
    state_type: type[StateT]

    def decide(
        self, request: PolicyInput, state: StateT, *, params: ParamsT
    ) -> PolicyResult[StateT]: ...


class LoadCap(PolicyParams):
    """Parameters shared in shape (not in code) by the cluster-aware policies."""

    max_load_desired: float = Field(default=0.97, gt=0, le=1)


def in_round_order(reports: Sequence[EpochReport]) -> tuple[EpochReport, ...]:
    """A round's reports in the order every caller hands them to a policy.

    By the reporter's time, ties by job (stable: one job's reports keep their
    order). The simulator and the runtime's ``autoscale`` both use it, so a
    round's reports reach the policy identically in both.
    """
    return tuple(sorted(reports, key=lambda r: (r.at, r.job)))
