"""Clients of trainscaler: the HTTP API (``TrainscalerClient``) and Celery (``CeleryClient``).

``TrainscalerClient`` is a small typed wrapper over the API's routes (httpx,
bearer token); every non-2xx answer raises ``ApiError`` with the status and
the server's one-line detail. ``CeleryClient`` is for services that speak
Celery: it enqueues the runtime's tasks by name with ``send_task`` (JSON
payloads, the routes of ``workers.celery_app``) without importing the tasks.

``CeleryClient.report_confirmed`` is the reporter's side of "no report lost":
Celery's Redis transport takes a message off its list (``BRPOP``) and only
then records it as unacknowledged (a second command), so a message delivered
at the instant Redis dies is gone, whatever Redis persists. The reporter
waits for the report's result (stored in Redis) and sends the same report
again when none comes; the runtime decides each epoch once, so a repeat is
harmless.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from celery import Celery
from celery.exceptions import TimeoutError as ResultTimeout
from celery.result import AsyncResult
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from scheduler_core.models import EpochReport, TrainRequest, TrainTask, job_key
from workers.settings import Settings

SUBMIT = "trainscaler.submit"
REPORT_EPOCH = "trainscaler.report_epoch"
FINISH = "trainscaler.finish"
SCHEDULE = "trainscaler.schedule"

# Short: a producer whose broker is down should fail fast, not hang a request.
SEND_RETRY_POLICY: Mapping[str, float] = {
    "max_retries": 2,
    "interval_start": 0.0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


def submission_job_id(submission_id: str) -> str:
    """The job id the runtime gives a submission (``handlers.accept_submission``).

    Derived from the submit task's id, so a redelivered submit records the
    same job and a producer knows the id before any worker ran.
    """
    return uuid.uuid5(uuid.NAMESPACE_URL, f"trainscaler:{submission_id}").hex[:12]


def new_submission_id() -> str:
    return uuid.uuid4().hex


def submission_key(request: TrainRequest, submission_id: str) -> str:
    """The job key a submission gets: ``namespace/<submission_job_id>``."""
    return job_key(request.namespace, submission_job_id(submission_id))


def task_job_key(task: TrainTask) -> str:
    """The runtime's job key for a KubeML train task: ``namespace/job_id``.

    A ``job_id`` that already names its namespace (``ns/name``) is kept as is.
    """
    if "/" in task.job_id:
        return task.job_id
    return job_key(task.parameters.namespace, task.job_id)


def report_from_task(task: TrainTask, *, at: float) -> EpochReport:
    """KubeML's end-of-epoch ``TrainTask`` as the runtime's ``EpochReport``."""
    state = task.state
    return EpochReport(
        job=task_job_key(task),
        replicas=state.parallelism,
        epoch_time_s=state.elapsed_time,
        epoch=state.epoch,
        total_epochs=state.total_epochs
        if state.total_epochs is not None
        else task.parameters.epochs,
        iterations=state.iterations,
        nodes=state.nodes,
        at=at,
    )


@dataclass(frozen=True)
class ConfirmedReport:
    """A report the runtime accepted: its task's answer and how many re-sends it took."""

    outcome: dict[str, Any]
    resends: int


class ReportNotConfirmed(Exception):
    """No answer to a report after every attempt."""


class CeleryClient:
    """Enqueues the runtime's tasks by name on the configured broker."""

    def __init__(self, settings: Settings, *, app: Celery | None = None) -> None:
        if app is None:
            # Imported here: building the Celery app is only needed by producers.
            from workers.celery_app import create_app

            app = create_app(settings)
        self.app = app

    def send(self, name: str, *args: Any, task_id: str | None = None) -> str:
        # ignore_result: producers read the runtime's state, never task results; it
        # also keeps the result backend from subscribing to a channel per send.
        result = self.app.send_task(
            name,
            args=list(args),
            task_id=task_id,
            retry=True,
            retry_policy=dict(SEND_RETRY_POLICY),
            ignore_result=True,
        )
        return str(result.id)

    def submit(self, request: TrainRequest, *, task_id: str | None = None) -> tuple[str, str]:
        """Queue a train request; returns ``(task id, job key)``.

        ``task_id`` (a new one when None) fixes the job key in advance:
        ``submission_key``.
        """
        task_id = task_id or new_submission_id()
        job = submission_key(request, task_id)
        self.send(SUBMIT, request.model_dump(mode="json"), task_id=task_id)
        return task_id, job

    def report(self, report: EpochReport) -> str:
        return self.send(REPORT_EPOCH, report.model_dump(mode="json"))

    def send_report(self, report: EpochReport) -> str:
        """Queue a report whose answer is kept, for ``report_confirmed``; its task id."""
        result = self.app.send_task(
            REPORT_EPOCH,
            args=[report.model_dump(mode="json")],
            retry=True,
            retry_policy=dict(SEND_RETRY_POLICY),
        )
        return str(result.id)

    def report_confirmed(
        self,
        report: EpochReport,
        *,
        sent: str | None = None,
        timeout: float = 15.0,
        attempts: int = 5,
    ) -> ConfirmedReport:
        """Send ``report`` (or wait for the copy already ``sent``) until it is answered.

        Re-sends the same report when no answer comes within ``timeout``; the
        runtime's per-epoch de-duplication makes every repeat harmless.
        """
        task_id = sent or self.send_report(report)
        for attempt in range(attempts):
            result = self.app.AsyncResult(task_id)
            try:
                outcome = result.get(timeout=timeout)
            except (ResultTimeout, OperationalError, OSError):
                _stop_waiting(result)
                if attempt + 1 == attempts:
                    break
                task_id = self.send_report(report)
                continue
            if not isinstance(outcome, dict):
                raise ReportNotConfirmed(f"unexpected answer {outcome!r}")
            return ConfirmedReport(outcome=outcome, resends=attempt)
        raise ReportNotConfirmed(f"no answer for {report.job} after {attempts} attempts")

    def finish(self, job: str, *, reply_to: str | None = None) -> str:
        """Queue a finish; ``reply_to`` (a reply key) gets the answer once it is done."""
        if reply_to is None:
            return self.send(FINISH, job)
        return self.send(FINISH, job, reply_to)

    def schedule(self, job: str | None = None) -> str:
        """Wake the scheduler: the API's trigger after a push that claimed it
        (``workers.intake``), with the pushed job as the run's hint."""
        return self.send(SCHEDULE, [job]) if job is not None else self.send(SCHEDULE)

    def close(self) -> None:
        self.app.close()


class ApiError(Exception):
    """The API answered with an error status."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict):
        detail = body.get("detail", body)
        if isinstance(detail, list):  # 422: one entry per field
            return "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', ()))}: {d.get('msg', '')}"
                for d in detail
                if isinstance(d, dict)
            )
        return str(detail)
    return str(body)


class TrainscalerClient:
    """Typed calls of the trainscaler HTTP API."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> TrainscalerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> httpx.Response:
        response = self._http.request(method, path, json=json, params=params)
        if response.status_code not in ok:
            raise ApiError(response.status_code, _detail(response))
        return response

    # --- KubeML routes ---------------------------------------------------------

    def train(self, request: TrainRequest, *, wait: float | None = None) -> dict[str, Any]:
        """``POST /train``: the answer carries ``job`` (namespace/id) and ``job_id``."""
        params = {"wait": wait} if wait is not None else None
        body = request.model_dump(mode="json", exclude_none=True)
        response = self._call("POST", "/train", json=body, params=params, ok=(201, 202))
        answer: dict[str, Any] = response.json()
        return answer

    def report(self, task: TrainTask, *, wait: float | None = None) -> dict[str, Any]:
        """``POST /job``: ``parallelism`` is set once decided (200), else ``poll`` (202)."""
        params = {"wait": wait} if wait is not None else None
        body = task.model_dump(mode="json", exclude_none=True)
        response = self._call("POST", "/job", json=body, params=params, ok=(200, 202))
        answer: dict[str, Any] = response.json()
        return answer

    def finish(self, task_id: str, *, wait: float | None = None) -> dict[str, Any]:
        params = {"wait": wait} if wait is not None else None
        response = self._call("DELETE", f"/finish/{task_id}", params=params, ok=(200, 202))
        answer: dict[str, Any] = response.json()
        return answer

    # --- trainscaler routes --------------------------------------------------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        response = self._call("GET", "/health", ok=(200, 503))
        body: dict[str, Any] = response.json()
        return response.status_code == 200, body

    def jobs(self) -> list[dict[str, Any]]:
        body: list[dict[str, Any]] = self._call("GET", "/jobs").json()
        return body

    def job(self, job: str) -> dict[str, Any]:
        body: dict[str, Any] = self._call("GET", f"/jobs/{job}").json()
        return body

    def plan(self) -> dict[str, Any]:
        """``GET /plan``: the planner's newest round."""
        body: dict[str, Any] = self._call("GET", "/plan").json()
        return body

    def queue(self) -> dict[str, Any]:
        body: dict[str, Any] = self._call("GET", "/queue").json()
        return body

    def metrics_text(self) -> str:
        return self._call("GET", "/metrics").text


def _stop_waiting(result: AsyncResult) -> None:
    """Drop a result nobody will wait for any more.

    A ``get`` that timed out leaves the result registered with the backend and
    its result channel subscribed until an answer comes; a reporter that re-sends
    would keep one per timeout, and each unsubscribes only when the app is freed
    (a failed ``UNSUBSCRIBE`` inside ``__del__`` if Redis is away by then).
    Unsubscribing may fail now too, if Redis is away: the channel then goes with
    the connection.
    """
    with contextlib.suppress(RedisError, RuntimeError, OSError):
        result.backend.remove_pending_result(result)
