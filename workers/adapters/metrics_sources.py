"""Where ``fetch_metrics`` gets per-job observations: two ``MetricsSource``s.

* ``PushedReportsSource`` (default): the newest epoch report each job pushed
  itself through ``report_epoch`` (kept in ``P job:<job>:last_report``).
* ``PrometheusSource``: one instant query per job against the Prometheus HTTP
  API (``GET <url>/api/v1/query``); the query is ``Settings.prometheus_query``
  with ``{job}`` replaced by the job key, and its value is read as the epoch
  time in seconds. A job whose query fails or returns nothing is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

from scheduler_core.models import EpochReport
from scheduler_core.ports import Clock
from workers.adapters.state_store import StateStore


class PushedReportsSource:
    def __init__(self, store: StateStore) -> None:
        self._store = store

    def fetch(self, jobs: Sequence[str]) -> Sequence[EpochReport]:
        reports = (self._store.last_report(job) for job in jobs)
        return [report for report in reports if report is not None]


class PrometheusSource:
    def __init__(
        self,
        *,
        url: str,
        query_template: str,
        store: StateStore,
        clock: Clock,
        timeout: float = 5.0,
        client: httpx.Client | None = None,
    ) -> None:
        self._url = url.rstrip("/")
        self._template = query_template
        self._store = store
        self._clock = clock
        self._client = client or httpx.Client(timeout=timeout)

    def query_for(self, job: str) -> str:
        # str.replace, not format: PromQL label matchers are full of braces.
        return self._template.replace("{job}", job)

    def fetch(self, jobs: Sequence[str]) -> Sequence[EpochReport]:
        reports = []
        for job in jobs:
            value = self._instant(self.query_for(job))
            if value is None:
                continue
            last = self._store.last_report(job)
            applied = self._store.applied(job)
            replicas = applied.target if applied else (last.replicas if last else 0)
            reports.append(
                EpochReport(job=job, replicas=replicas, epoch_time_s=value, at=self._clock.now())
            )
        return reports

    def _instant(self, query: str) -> float | None:
        try:
            response = self._client.get(f"{self._url}/api/v1/query", params={"query": query})
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError):
            return None
        if body.get("status") != "success":
            return None
        result = body.get("data", {}).get("result", [])
        if not result:
            return None
        try:
            value = float(result[0]["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            return None
        return value if math.isfinite(value) and value > 0 else None
