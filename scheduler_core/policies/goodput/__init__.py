"""Policy ``goodput``: shortest estimated remaining time first, each job at its efficient size.

How another program drives it
-----------------------------
Build, every scheduling round (e.g. every 60 s):

* one :class:`~scheduler_core.models.ElasticJob` per job still in the cluster:
  ``current_replicas`` = the replicas the job has (running or pending),
  ``phase`` = ``Running`` when some replica runs (else ``Pending``),
  ``min_replicas``/``max_replicas`` its bounds, ``default_parallelism`` the
  replicas the user asked for, ``application`` an identity shared by jobs
  expected to scale alike (program and batch size; optional, it lets a new
  job start from what earlier jobs measured), ``requests``/``limits`` with
  ``gpu`` per replica;
* a :class:`~scheduler_core.models.ClusterResource` with ``gpu_total``,
  ``node_count`` and ``nodes.nodes_gpu_free`` (free GPUs per node);
* the :class:`~scheduler_core.models.EpochReport` s that arrived since the
  last round, in time order: a first contact when a job is submitted
  (``epoch_time_s=None``, ``total_epochs=N``, ``at`` = submission time), then
  one per finished epoch with ``replicas``, ``epoch_time_s`` (seconds spent
  training in that epoch, not counting restarts), ``epoch`` k,
  ``total_epochs`` N, ``iterations`` done in that epoch (optional, better
  than epochs as a unit of work), ``nodes`` and ``at``;

then call ``scheduler_core.registry.decide("goodput", PolicyInput(jobs=...,
cluster=..., reports=..., now=...), state=previous_state, params=...)``. The
result's ``plan.targets()`` maps each job key to its replica count (0 =
hold no replicas); ``plan.decisions`` carry the reasons; keep
``result.state`` (JSON: ``state.model_dump_json()``) for the next round.

What it decides, and where
--------------------------
* ``plan``: each job's curve, remaining time R(n), rank (remaining service,
  least first) and size (rule ``goodput.queue``: the n minimising
  R(n) x (1 + n x (jobs - 1) / GPUs) among the measured counts, the
  node-friendly counts between them (rule ``goodput.between``, interpolated)
  and, while the curve still scales, a probe at ``probe_factor`` (4) x the
  largest measured count (rule ``goodput.reach``); rule ``goodput.probe``,
  ``scheduler_core.curves``: the probe's predicted gain is discounted by the
  efficiency the curve has lost at its top, speedup 1 + (n / top - 1) x e;
  rule ``goodput.single``: a one-replica point is off the curve once a
  larger count is measured, since one replica exchanges no gradients).
* ``allocate``: the ranked pass: sizes as far as GPUs last, and the rules
  that make a start wait (``goodput.admit``, ``goodput.soon``,
  ``goodput.protect``) or a grow wait (``goodput.measure``), and the one
  that keeps a running job's probe to GPUs nobody holds (``goodput.spare``);
  leftovers.
* ``shape``: where pods land (kube-scheduler ``MostAllocated``, ReplicaSet
  shrink order) and the spread slowdown that costs (``goodput.spread``,
  ``goodput.shape``); the hold rule every voluntary resize passes.
* ``explain``: each decision with the rule that made it and its numbers.
* ``params``: the parameters and the state kept between rounds.

Measured
--------
On workloads 1-4 of the Pollux traces (own simulator, Kubernetes-style
placement; ``python -m bench.policies``) goodput is 0.760x Tiresias's
average JCT (geomean), at most 0.853x on one workload, at most 0.91 restarts
per job, and 0.707 / 0.767 / 0.730 / 0.632x on the four generated variant
families; every rule above was adopted on that bench, and the last three
(goodput.reach, goodput.between, goodput.spare) were also checked on seven
held-out families (``--held-out``): 0.751 -> 0.717 over all of them. What
each rule changed, per application, and every variant measured and not
adopted (with why) is in docs/simulator.md, "goodput: measurement log".
"""

from __future__ import annotations

import math
from typing import ClassVar

from scheduler_core.goodput_books import Limits, account_time, ingest_reports
from scheduler_core.models import ScalingPlan
from scheduler_core.policies.base import PolicyInput, PolicyResult
from scheduler_core.policies.goodput.allocate import allocate
from scheduler_core.policies.goodput.explain import decide_job
from scheduler_core.policies.goodput.params import GoodputParams, GoodputState
from scheduler_core.policies.goodput.plan import estimate

__all__ = ["GoodputParams", "GoodputPolicy", "GoodputState"]


class GoodputPolicy:
    name: ClassVar[str] = "goodput"
    params_type = GoodputParams
    state_type = GoodputState

    def decide(
        self, request: PolicyInput, state: GoodputState, *, params: GoodputParams
    ) -> PolicyResult[GoodputState]:
        cluster = request.cluster
        gpus_per_node = cluster.gpu_total // cluster.node_count if cluster.node_count else 1
        limits = Limits(
            restart_s=params.restart_s,
            history=params.history,
            max_applications=params.max_applications,
            gpus_per_node=gpus_per_node,
        )
        books, apps = ingest_reports(request, state.jobs, apps=state.apps, limits=limits)
        books = account_time(request, state.last_now, books=books)
        budget = math.floor(cluster.gpu_total * params.max_load_desired)
        weight = (len(request.jobs) - 1) / max(budget, 1)
        plans = [
            estimate(
                job,
                books[job.key],
                apps=apps,
                params=params,
                weight=weight,
                gpus_per_node=gpus_per_node,
            )
            for job in request.jobs
        ]
        interval = request.now - state.last_now if state.last_now is not None else 0.0
        allocate(
            plans,
            budget,
            node_free=cluster.nodes.nodes_gpu_free,
            gpus_per_node=gpus_per_node,
            params=params,
            interval_s=max(0.0, interval),
        )
        decisions = []
        for plan in plans:
            decision, book = decide_job(plan, params, now=request.now)
            decisions.append(decision)
            books[plan.job.key] = book
        plan_out = ScalingPlan(
            policy=self.name, decisions=tuple(sorted(decisions, key=lambda d: d.job))
        )
        new_state = GoodputState.model_construct(jobs=books, apps=apps, last_now=request.now)
        return PolicyResult(plan=plan_out, state=new_state)

    def forget(self, state: GoodputState, job: str) -> GoodputState:
        return GoodputState.model_construct(
            jobs={k: v for k, v in state.jobs.items() if k != job},
            apps=state.apps,
            last_now=state.last_now,
        )
