"""The cluster-wide part of the state store: plans, free capacity, the cluster policy's round.

Owns the newest cluster plan and its history, the free capacity the newest
plan leaves (reserved and released by per-job decisions), the cluster
policy's state with its inbox of reports (read and committed as one round),
and the autoscale run records. ``StateStore`` builds on it; the key layout
of both is in ``workers.adapters.state_store``.
"""

from __future__ import annotations

from typing import Any

import redis

from scheduler_core.models import EpochReport, Resources
from workers.adapters import state_scripts as scripts
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_replies import opt_text, text
from workers.adapters.state_records import AutoscaleRun, ClusterRound, PlanRecord, Reservation


class ClusterBooks:
    """Typed reads and writes of the cluster-wide state (see the module docstring)."""

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_KEY_PREFIX, history: int = 200
    ) -> None:
        self.redis = client
        self.prefix = prefix
        self.history = history
        self._reserve = client.register_script(scripts.RESERVE)
        self._commit_cluster_round = client.register_script(scripts.COMMIT_CLUSTER_ROUND)

    def key(self, suffix: str) -> str:
        return f"{self.prefix}{suffix}"

    # --- plans and capacity ----------------------------------------------------

    def save_plan(self, record: PlanRecord, *, free: Resources | None) -> None:
        data = record.model_dump_json()
        pipe = self.redis.pipeline()
        pipe.set(self.key("plan:latest"), data)
        pipe.lpush(self.key("plan:history"), data)
        pipe.ltrim(self.key("plan:history"), 0, self.history - 1)
        if free is not None:
            pipe.delete(self.key("capacity:free"))
            pipe.hset(
                self.key("capacity:free"),
                mapping={
                    "cpu_milli": free.cpu_milli,
                    "memory_mega": free.memory_mega,
                    "gpu": free.gpu,
                },
            )
        pipe.execute()

    def latest_plan(self) -> PlanRecord | None:
        """The newest cluster plan with every decision's reason."""
        return self.plan_of(self.redis.get(self.key("plan:latest")))

    def latest_plan_in(self, pipe: Any) -> None:
        """Queue the read of the newest plan on ``pipe``; its reply goes to ``plan_of``."""
        pipe.get(self.key("plan:latest"))

    @staticmethod
    def plan_of(raw: Any) -> PlanRecord | None:
        return PlanRecord.model_validate_json(raw) if raw else None

    def plan_history(self, *, limit: int = 20) -> list[PlanRecord]:
        raw = self.redis.lrange(self.key("plan:history"), 0, limit - 1)
        return [PlanRecord.model_validate_json(r) for r in raw]

    def reserve(self, per_replica: Resources, replicas: int) -> Reservation:
        """Take up to ``replicas`` replicas' room from what the newest plan leaves free.

        No plan yet means nothing is known about the cluster: everything is granted.
        """
        if replicas <= 0 or per_replica == Resources(gpu_resource=per_replica.gpu_resource):
            # Nothing asked, or a job whose requests are unknown: nothing to hold back.
            return Reservation(granted=max(replicas, 0), constrained=False)
        granted, constrained = self._reserve(
            keys=[self.key("capacity:free")],
            args=[replicas, per_replica.cpu_milli, per_replica.memory_mega, per_replica.gpu],
        )
        return Reservation(granted=int(granted), constrained=bool(constrained))

    def release(self, per_replica: Resources, replicas: int) -> None:
        """Give back room for ``replicas`` replicas (a shrink or an undone reservation)."""
        key = self.key("capacity:free")
        if replicas <= 0 or per_replica == Resources(gpu_resource=per_replica.gpu_resource):
            return
        if not self.redis.exists(key):
            return
        pipe = self.redis.pipeline()
        for name, need in (
            ("cpu_milli", per_replica.cpu_milli),
            ("memory_mega", per_replica.memory_mega),
            ("gpu", per_replica.gpu),
        ):
            if need > 0:
                pipe.hincrby(key, name, need * replicas)
        pipe.execute()

    def free_capacity(self) -> Resources | None:
        raw = self.redis.hgetall(self.key("capacity:free"))
        if not raw:
            return None
        values = {text(k): int(v) for k, v in raw.items()}
        return Resources(
            cpu_milli=max(0, values.get("cpu_milli", 0)),
            memory_mega=max(0, values.get("memory_mega", 0)),
            gpu=max(0, values.get("gpu", 0)),
        )

    def cluster_policy_state(self, policy: str) -> str | None:
        return opt_text(self.redis.get(self.key(f"cluster:policy:{policy}")))

    def inbox_key(self, policy: str) -> str:
        """The reports waiting for cluster policy ``policy``'s next round (a LIST)."""
        return self.key(f"cluster:policy:{policy}:inbox")

    def read_cluster_round(self, policy: str, *, limit: int) -> ClusterRound:
        """The cluster policy's state and up to ``limit`` waiting reports, in one read."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.key(f"cluster:policy:{policy}"))
        pipe.lrange(self.inbox_key(policy), 0, limit - 1)
        state, raw = pipe.execute()
        reports = tuple(EpochReport.model_validate_json(r) for r in raw)
        return ClusterRound(policy=policy, state=opt_text(state), reports=reports)

    def commit_cluster_round(self, read: ClusterRound, new_state: str) -> bool:
        """Store a round's new state and drop the reports it consumed, atomically.

        Applies only if the state is still the one ``read`` saw: a second
        round that read the same reports (an autoscale lock that expired under
        a stalled worker) cannot count them again. Reports that arrived after
        the read stay in the inbox for the next round.
        """
        done = self._commit_cluster_round(
            keys=[self.key(f"cluster:policy:{read.policy}"), self.inbox_key(read.policy)],
            args=[read.state or "", new_state, len(read.reports)],
        )
        return bool(int(done))

    def inbox_length(self, policy: str) -> int:
        return int(self.redis.llen(self.inbox_key(policy)))

    # --- autoscale runs --------------------------------------------------------

    def next_run_id(self) -> int:
        return int(self.redis.incr(self.key("autoscale:run_id")))

    def record_run(self, run: AutoscaleRun) -> None:
        pipe = self.redis.pipeline()
        pipe.lpush(self.key("autoscale:runs"), run.model_dump_json())
        pipe.ltrim(self.key("autoscale:runs"), 0, 999)
        pipe.execute()

    def count_skipped_run(self) -> int:
        return int(self.redis.incr(self.key("autoscale:skipped")))

    def skipped_runs(self) -> int:
        return int(self.redis.get(self.key("autoscale:skipped")) or 0)

    def runs(self, *, limit: int = 1000) -> list[AutoscaleRun]:
        raw = self.redis.lrange(self.key("autoscale:runs"), 0, limit - 1)
        return [AutoscaleRun.model_validate_json(r) for r in raw]
