"""EDL's ``Autoscaler``, on the I/O side: inquire, plan with ``edl``, apply.

Parity with PaddlePaddle EDL's Go API::

    NewAutoscaler(kubeClient, jobUpdater, WithMaxLoadDesired(f))  ->
        Autoscaler(cluster_reader, replica_scaler, max_load_desired=f)
        Autoscaler(...).with_max_load_desired(f)
    InquiryResource()  -> inquiry_resource()
    Run() loop body    -> run_once()
    Run()              -> run(stop_event, interval)

The planning is ``scheduler_core.registry.decide("edl", ...)``: the same code
the simulator runs. The facade keeps no state between rounds but the
policy's JSON-able state, which it passes in and takes back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.models import ClusterResource, ScalingPlan
from scheduler_core.policies.base import PolicyInput, PolicyState
from scheduler_core.ports import (
    Clock,
    ClusterReader,
    PermanentScaleError,
    ReplicaScaler,
    ScaleRequest,
    TransientScaleError,
)
from scheduler_core.registry import decide

log = logging.getLogger(__name__)

EDL = "edl"
DEFAULT_MAX_LOAD_DESIRED = 0.97  # EDL's command-line default


@dataclass(frozen=True)
class RoundResult:
    """One inquire-plan-apply round: the plan and what happened to each change."""

    plan: ScalingPlan
    cluster: ClusterResource
    applied: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class Autoscaler:
    """EDL's autoscaler loop over a ``ClusterReader`` and a ``ReplicaScaler``."""

    def __init__(
        self,
        kube_client: ClusterReader,
        job_tracker: ReplicaScaler,
        *,
        max_load_desired: float = DEFAULT_MAX_LOAD_DESIRED,
        clock: Clock,
        policy: str = EDL,
        observed: Callable[[str], dict[str, Any] | None] | None = None,
    ) -> None:
        if not 0 < max_load_desired <= 1:
            raise ValueError(f"max_load_desired must be in (0, 1], got {max_load_desired}")
        self._reader = kube_client
        self._scaler = job_tracker
        self._clock = clock
        self.max_load_desired = max_load_desired
        self.policy = policy
        self._state: PolicyState | None = None
        # The reader's cached copy of a job, handed to the scaler (saves its read).
        self._observed = observed

    def with_max_load_desired(self, max_load_desired: float) -> Autoscaler:
        """EDL's ``WithMaxLoadDesired(f)`` option: a copy with another load cap."""
        return Autoscaler(
            self._reader,
            self._scaler,
            max_load_desired=max_load_desired,
            clock=self._clock,
            policy=self.policy,
        )

    def inquiry_resource(self) -> ClusterResource:
        """EDL ``InquiryResource``: the cluster's totals, requests and per-node room."""
        return self._reader.inquire()

    def plan(
        self, state: PolicyState | None = None
    ) -> tuple[ScalingPlan, ClusterResource, PolicyState]:
        cluster = self.inquiry_resource()
        jobs = tuple(self._reader.elastic_jobs())
        result = decide(
            self.policy,
            PolicyInput(jobs=jobs, cluster=cluster, now=self._clock.now()),
            state=state,
            params={"max_load_desired": self.max_load_desired},
        )
        return result.plan, cluster, result.state

    def run_once(self) -> RoundResult:
        """One round of EDL's ``Run`` loop: inquire, dry-run every job, apply the changes."""
        plan, cluster, self._state = self.plan(self._state)
        applied: dict[str, int] = {}
        failed: dict[str, str] = {}
        for decision in plan.changes:
            request = ScaleRequest(
                job=decision.job,
                replicas=decision.target,
                reason=decision.reason,
                policy=plan.policy,
                observed=self._observed(decision.job) if self._observed else None,
            )
            try:
                applied[decision.job] = self._scaler.scale(request).after
            except (TransientScaleError, PermanentScaleError) as error:
                # EDL: a failed job is retried by the next round, the others still apply.
                failed[decision.job] = str(error)
                log.warning("scaling %s to %d failed: %s", decision.job, decision.target, error)
        return RoundResult(plan=plan, cluster=cluster, applied=applied, failed=failed)

    def run(self, stop: threading.Event, interval: float) -> int:
        """EDL's ``Run``: a round every ``interval`` seconds until ``stop`` is set.

        Returns the number of rounds run. A failing round is logged and the
        loop goes on, as EDL's does.
        """
        rounds = 0
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("autoscale round failed")
            rounds += 1
            stop.wait(interval)
        return rounds
