"""KubeML parameter-server mode: scale a job by telling its parameter server.

A job submitted with a parameter-server URL (``TrainRequest.ps_url``, KubeML's
``psUrl``) runs its workers under that server, not under a Kubernetes
workload. ``ParameterServerScaler`` is the ``ReplicaScaler`` for such jobs:

* it speaks KubeML's wire format (``ml/pkg/ps/client/client.go``): the first
  decision (``CreateTask``) POSTs KubeML's ``TrainTask``
  (``{"request": {...}, "job": {"id", "state": {"parallelism", "elapsed_time"}}}``)
  to ``<ps_url>/start``, later ones (``UpdateTask``) POST the ``JobState``
  (``{"parallelism", "elapsed_time"}``) to ``<ps_url>/update/<job_id>``;
* a request with a ``generation`` (the runtime's decision for a report, keep
  and clamped epochs included) is always sent: a KubeML train job blocks
  until its ``/update`` arrives, so each report gets exactly one answer (the
  runtime applies each generation once); a request without one only confirms
  a count already in force;
* the parallelism the server accepted is kept in Redis (``P ps:replicas``
  HASH job -> replicas): it is the outcome's ``before``;
* failures map onto the port's errors: no answer, timeouts, 408, 409, 425,
  429 and 5xx are ``TransientScaleError`` (the ``scale`` task retries with
  backoff); other answers are ``PermanentScaleError`` (dead-lettered).

``ParameterServerRouter`` sends jobs that have a ``ps_url`` here and every
other job to the default scaler (Kubernetes, or the recording one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from urllib.parse import quote, urlsplit

import httpx
import redis

from scheduler_core.models import TaskOperation, TrainRequest
from scheduler_core.ports import (
    PermanentScaleError,
    ReplicaScaler,
    ScaleOutcome,
    ScaleRequest,
    TransientScaleError,
)
from workers.adapters.kubeml_wire import job_state_json, train_task_json
from workers.adapters.state_store import JobRecord, StateStore

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
DEFAULT_TIMEOUT_S = 10.0
# Header values must be latin-1; a reason is free text, so it is trimmed and made ASCII.
_REASON_HEADER_MAX = 200


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode()[:_REASON_HEADER_MAX]


class ParameterServerScaler:
    """``ReplicaScaler`` that POSTs KubeML train tasks to a job's parameter server."""

    def __init__(
        self,
        store: StateStore,
        *,
        http: httpx.Client | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._store = store
        self._http = http or httpx.Client(timeout=timeout, follow_redirects=False)

    @property
    def replicas_key(self) -> str:
        return self._store.key("ps:replicas")

    def ps_urls(
        self, jobs: Sequence[str], *, records: Mapping[str, JobRecord | None] | None = None
    ) -> dict[str, str | None]:
        """``ps_url`` of each job, with one read for all their records (none when the
        caller read them already)."""
        found = records if records is not None else self._store.get_jobs(list(jobs))
        return {job: _ps_url(found.get(job)) for job in jobs}

    def current_replicas(self, job: str) -> int:
        """The parallelism the job's parameter server last accepted (0: never started)."""
        try:
            value = self._store.redis.hget(self.replicas_key, job)
        except redis.RedisError as error:
            raise TransientScaleError(f"reading {job}'s parallelism: {error}") from error
        return int(value) if value is not None else 0

    def scale(self, request: ScaleRequest) -> ScaleOutcome:
        """Answer the job's parameter server (policy and rule have no place there)."""
        job, replicas = request.job, request.replicas
        _checked_target(job, self._store.get_job(job), replicas=replicas)
        before = self.current_replicas(job)
        if request.generation is None:
            if before == replicas:
                # The port: the count in force is only confirmed; nothing to tell the server.
                return ScaleOutcome(job=job, before=before, after=replicas)
            key = f"{job}:{replicas}"
        else:
            # One decision of the runtime for this job, sent even when the
            # parallelism stays: KubeML's train job waits for it after every epoch.
            key = f"{job}:gen{request.generation}"
        after = self._send(
            job,
            replicas,
            key=key,
            elapsed_time=request.epoch_time_s,
            reason=request.reason_text(),
        )
        return ScaleOutcome(job=job, before=before, after=after)

    def _send(
        self, job: str, replicas: int, *, key: str, elapsed_time: float | None, reason: str
    ) -> int:
        record, request, url = _checked_target(job, self._store.get_job(job), replicas=replicas)
        started = bool(self._store.redis.hexists(self.replicas_key, job))
        operation = TaskOperation.UPDATE_TASK if started else TaskOperation.CREATE_TASK
        if operation == TaskOperation.CREATE_TASK:
            endpoint = f"{url}/start"
            body = train_task_json(
                request, job_id=record.job_id, parallelism=replicas, elapsed_time=elapsed_time
            )
        else:
            endpoint = f"{url}/update/{quote(record.job_id, safe='')}"
            body = job_state_json(parallelism=replicas, elapsed_time=elapsed_time)
        headers = {
            # The server may see a retried call twice; this names the decision.
            "Idempotency-Key": f"{key}:{operation.name}",
            "X-Trainscaler-Reason": _ascii(reason),
        }
        try:
            response = self._http.post(endpoint, json=body, headers=headers)
        except httpx.TimeoutException as error:
            raise TransientScaleError(f"{job}: {endpoint} timed out: {error}") from error
        except httpx.HTTPError as error:
            raise TransientScaleError(f"{job}: {endpoint} unreachable: {error}") from error
        _raise_for_status(job, endpoint, response=response)
        self._store.redis.hset(self.replicas_key, job, replicas)
        log.info(
            "parameter server %s: %s parallelism %d",
            endpoint,
            operation.name,
            replicas,
            extra={"job": job, "target": replicas, "reason": reason},
        )
        return replicas

    def forget(self, job: str) -> None:
        """Drop the job's accepted parallelism (after KubeML ``taskFinished``)."""
        self._store.redis.hdel(self.replicas_key, job)

    def close(self) -> None:
        self._http.close()


def _ps_url(record: JobRecord | None) -> str | None:
    if record is None or record.request is None:
        return None
    return record.request.ps_url or None


def _checked_target(
    job: str, record: JobRecord | None, *, replicas: int
) -> tuple[JobRecord, TrainRequest, str]:
    """The job's record, its request and its parameter server's base URL."""
    request = record.request if record is not None else None
    if record is None or request is None or not request.ps_url:
        raise PermanentScaleError(f"{job}: no parameter-server URL (ps_url) recorded")
    url = request.ps_url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise PermanentScaleError(f"{job}: ps_url {url!r} is not an http(s) URL")
    if replicas < 1:
        # KubeML: a task's parallelism is at least one worker (its PS rejects zero).
        raise PermanentScaleError(f"{job}: a parameter-server job needs parallelism >= 1")
    return record, request, url


def _raise_for_status(job: str, endpoint: str, *, response: httpx.Response) -> None:
    status = response.status_code
    if 200 <= status <= 299:
        return
    message = f"{job}: {endpoint} answered HTTP {status}: {response.text[:200]}"
    if status in TRANSIENT_STATUSES or status >= 500:
        raise TransientScaleError(message)
    raise PermanentScaleError(message)


class ParameterServerRouter:
    """Jobs with a ``ps_url`` go to their parameter server; the rest to ``default``."""

    def __init__(self, default: ReplicaScaler, parameter_servers: ParameterServerScaler) -> None:
        self.default = default
        self.parameter_servers = parameter_servers

    def _target(self, job: str) -> ReplicaScaler:
        try:
            return self.routed([job])[job]
        except redis.RedisError as error:
            raise TransientScaleError(f"reading {job}'s record: {error}") from error

    def routed(
        self, jobs: Sequence[str], *, records: Mapping[str, JobRecord | None] | None = None
    ) -> dict[str, ReplicaScaler]:
        """The scaler of each job, with one read for all of them (a batch's routing;
        none with ``records``, the jobs' records as the caller read them).

        Redis errors propagate: the caller has taken nothing yet and may retry whole.
        """
        urls = self.parameter_servers.ps_urls(jobs, records=records)
        return {
            job: self.parameter_servers if url is not None else self.default
            for job, url in urls.items()
        }

    def forget(self, job: str) -> None:
        """KubeML ``taskFinished``: the job's parameter-server parallelism is dropped."""
        self.parameter_servers.forget(job)

    def scale(self, request: ScaleRequest) -> ScaleOutcome:
        return self._target(request.job).scale(request)


def with_parameter_servers(default: ReplicaScaler, *, store: StateStore) -> ReplicaScaler:
    """The runtime's scaler: ``default`` plus KubeML parameter-server mode."""
    return ParameterServerRouter(default, ParameterServerScaler(store))
