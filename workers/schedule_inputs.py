"""What a ``schedule`` run reads besides the queue: the newest plan and the jobs' policies.

* ``first_reads``: queued before a run's first pop, in its round trip: the
  schedule trigger cleared, the newest cluster plan read;
* ``plan_requests`` / ``plan_policies``: per-replica requests (the capacity
  clamp) and the policy of each job the planner saw;
* ``look_up``: jobs neither submitted nor in the newest plan, read by name
  (``JobLookup``): which policy drives each, and the object read, which goes
  on with the job's scale command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler_core.models import Resources
from scheduler_core.ports import ObservedJob
from workers.adapters.state_store import PlanRecord
from workers.wiring import Runtime

log = logging.getLogger(__name__)


def first_reads(
    rt: Runtime,
    clear_flag: str | None,
    *,
    hint: Sequence[str] = (),
    policies: tuple[str, ...] = (),
) -> Callable[[Any], None]:
    """What a run's first pop does first, in its round trip: read what the chunk
    decision needs of the ``hint`` jobs (those whose push triggered the run:
    ``StateStore.queue_read_chunk``, the first reply), clear the trigger, read
    the plan (the last reply)."""

    def queue(pipe: Any) -> None:
        if hint:
            rt.store.queue_read_chunk(pipe, list(hint), policies=policies)
        if clear_flag is not None:
            rt.store.clear_flag(clear_flag, pipe=pipe)
        rt.store.latest_plan_in(pipe)

    return queue


def plan_policies(rt: Runtime, plan: PlanRecord | None) -> dict[str, str]:
    """The policy of each job in the newest plan (read once per schedule run).

    A plan written before plans kept policies: every job it saw counts as the
    cluster policy's, as it did then.
    """
    if plan is None:
        return {}
    if plan.policies:
        return dict(plan.policies)
    return dict.fromkeys(plan.requests, rt.settings.cluster_policy)


def plan_requests(plan: PlanRecord | None) -> dict[str, Resources]:
    """Per-replica requests of the jobs in the newest plan (read once per schedule run)."""
    return dict(plan.requests) if plan is not None else {}


def look_up(rt: Runtime, jobs: list[str]) -> Mapping[str, ObservedJob]:
    """The ElasticJobs among ``jobs`` (neither submitted nor in the newest plan), read
    once per chunk with targeted reads.

    A new job's first reports may come before the round that first plans it:
    one of the cluster policy belongs to it all the same. Another policy's job
    is decided here, and the object read goes on with its scale command
    (``ScaleCommand.observed``): the scaler then reads only the target's
    ``/scale``, not the job a second time.
    """
    try:
        return rt.job_lookup.look_up(jobs)
    except Exception as error:  # the cluster unreachable: decide as before it was asked
        log.warning("job lookup failed; %d job(s) go to the job policy: %s", len(jobs), error)
        return {}
