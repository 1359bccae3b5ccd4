"""The Celery tasks: thin bindings of ``workers.handlers`` to task names and queues.

A payload that fails validation is never retried: it is dead-lettered with
its error and the task returns ``{"ok": False, "error": ...}``. ``scale``
takes one command or a batch; a command that fails transiently is sent again
on its own with exponential backoff and jitter, up to
``Settings.scale_max_retries`` attempts, then dead-lettered with its error.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import redis
from celery import Task
from celery.exceptions import Reject
from prometheus_client import REGISTRY
from pydantic import BaseModel, ValidationError

from scheduler_core.identity import JobKey
from scheduler_core.ports import PermanentScaleError
from workers import handlers
from workers.adapters.redis_queue import QueueFullError
from workers.celery_app import app
from workers.deadletters import validation_message
from workers.intake import is_reply_key
from workers.observability.metrics import ScaleResult as ScaleResultLabel
from workers.observability.metrics import scale_result
from workers.settings import get_settings
from workers.targets import NoTargetError
from workers.wiring import Runtime

# Redis itself away (a restart, a failover): the message goes back to its queue
# (or, if even that fails, stays unacked and is redelivered after the visibility
# timeout). Not Celery's autoretry: its retry publishes a copy and drops the
# original, and when that publish fails mid-restart the task is lost. The queue
# leases, per-report sequence numbers and generations make the redo safe.
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def _requeue_on_redis_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except REDIS_ERRORS as error:
            raise Reject(repr(error), requeue=True) from error

    # Celery checks arguments against the task's own signature (``Task.__header__``,
    # and the message guard before it runs), not the wrapper's ``*args, **kwargs``.
    run.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
    return run


class DeadLetteringTask(Task):  # type: ignore[misc]
    """A task whose unexpected failure is dead-lettered with its arguments and error.

    Payload errors are dead-lettered by the tasks themselves; this catches the
    rest (a bug, an adapter error that is not a Redis outage), so every message
    ends executed or dead-lettered. Celery acks the message either way.
    """

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        rt = runtime()
        # Celery has logged the failure; if Redis is away for the letter too, so be it.
        with contextlib.suppress(redis.RedisError):
            rt.dead_letters.add(
                task=str(self.name),
                payload={"args": args, "kwargs": kwargs},
                error=f"{type(exc).__name__}: {exc}",
                at=rt.clock.now(),
            )


def task_signature(function: Callable[..., Any]) -> inspect.Signature:
    """A task's arguments as callers pass them (a bound task's ``self`` left out)."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.name != "self"]
    return signature.replace(parameters=parameters)


def call_form(name: str, function: Callable[..., Any]) -> str:
    """``trainscaler.submit(payload)``: how docs/runtime.md writes a task's call."""
    return f"{name}({', '.join(task_signature(function).parameters)})"


def _dead_letter_wrong_arguments(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A call with arguments the task does not take is dead-lettered, saying what it takes.

    Without this Celery fails the task with a bare ``TypeError`` in the worker's
    log (``celery call trainscaler.submit --kwargs '{"request": ...}'``).
    """
    expected = task_signature(function)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        given = args[1:] if args and isinstance(args[0], Task) else args
        try:
            expected.bind(*given, **kwargs)
        except TypeError as error:
            text = f"wrong arguments: {error}; call it as {call_form(name, function)} (docs/runtime.md)"
            return _reject(
                runtime(), name, payload={"args": list(given), "kwargs": kwargs}, error=text
            )
        return function(*args, **kwargs)

    return run


def _task(**options: Any) -> Callable[[Callable[..., Any]], Task]:
    """``app.task`` with a type (Celery's decorator is untyped), requeueing on Redis errors
    and dead-lettering calls with wrong arguments."""
    decorator: Callable[[Callable[..., Any]], Task] = app.task(base=DeadLetteringTask, **options)

    def register(function: Callable[..., Any]) -> Task:
        checked = _dead_letter_wrong_arguments(str(options["name"]), function)
        return decorator(_requeue_on_redis_errors(checked))

    return register


class FinishRequest(BaseModel):
    """The argument of ``trainscaler.finish``: a job key."""

    job: JobKey


@lru_cache(maxsize=1)
def runtime() -> Runtime:
    """This worker process's adapters, built on first use.

    Its metrics go on prometheus_client's default registry: the one the worker's
    endpoint serves (``workers.observability.worker_exposition``).
    """
    return Runtime(get_settings(), registry=REGISTRY)


def _reject(rt: Runtime, task: str, *, payload: Any, error: str) -> dict[str, Any]:
    letter = rt.dead_letters.add(task=task, payload=payload, error=error, at=rt.clock.now())
    return {"ok": False, "error": letter.error, "dead_lettered": True}


def _trigger_schedule(rt: Runtime) -> None:
    # One schedule task in flight is enough: it drains the queue it finds.
    if rt.store.claim_flag(handlers.SCHEDULE_FLAG, ttl=handlers.schedule_flag_ttl(rt)):
        schedule.apply_async()


def _schedule_for(job: str) -> None:
    """The trigger of a push that claimed it: a run hinted with the pushed job."""
    schedule.apply_async(args=[[job]])


def _send_scale(command: handlers.ScaleCommand) -> None:
    _send_scales([command])


def _send_scales(commands: list[handlers.ScaleCommand], *, countdown: float | None = None) -> None:
    scale.apply_async(args=[[c.model_dump(mode="json") for c in commands]], countdown=countdown)


@_task(name="trainscaler.submit", bind=True)
def submit(self: Task, payload: Any = None) -> dict[str, Any]:
    rt = runtime()
    try:
        job = handlers.accept_submission(
            rt, payload, submission_id=str(self.request.id), trigger=_schedule_for
        )
    except ValidationError as error:
        return _reject(rt, "trainscaler.submit", payload=payload, error=validation_message(error))
    except handlers.OutOfScope as error:
        return _reject(rt, "trainscaler.submit", payload=payload, error=str(error))
    except NoTargetError as error:
        return _reject(rt, "trainscaler.submit", payload=payload, error=f"refused: {error}")
    except QueueFullError as error:
        return {"ok": False, "error": str(error)}
    return {"ok": True, "job": job}


@_task(name="trainscaler.report_epoch")
def report_epoch(payload: Any = None) -> dict[str, Any]:
    """For services that speak Celery: one hop into the API's own path (``workers.intake``)."""
    rt = runtime()
    try:
        report = handlers.accept_report(rt, payload, trigger=_schedule_for)
    except ValidationError as error:
        return _reject(
            rt, "trainscaler.report_epoch", payload=payload, error=validation_message(error)
        )
    except handlers.OutOfScope as error:
        return _reject(rt, "trainscaler.report_epoch", payload=payload, error=str(error))
    except QueueFullError as error:
        return {"ok": False, "error": str(error)}
    return {"ok": True, "job": report.job}


# Internal tasks: their outcomes live in Redis (decisions, applied targets,
# dead letters), so no result is stored for them.
@_task(name="trainscaler.schedule", ignore_result=True)
def schedule(jobs: Any = None) -> dict[str, Any]:
    """Decide what the SchedulerQueue holds. ``jobs``, optional: the job keys whose
    push triggered this run, read in its first round trip (a hint: anything else,
    or a job the queue does not return, is read with its chunk as usual)."""
    rt = runtime()
    hint = [j for j in jobs if isinstance(j, str)] if isinstance(jobs, list) else []
    # Cleared first (in the run's first round trip): a push from then on triggers
    # another run, so nothing waits unseen.
    summary = handlers.schedule_once(
        rt, send_scales=_send_scales, clear_flag=handlers.SCHEDULE_FLAG, hint=hint
    )
    if summary.more:
        _trigger_schedule(rt)
    return {
        "deliveries": summary.deliveries,
        "decisions": summary.decisions,
        "scales": summary.scales,
        "waiting": summary.waiting,
    }


@_task(name="trainscaler.scale", ignore_result=True)
def scale(commands: Any = None) -> dict[str, Any]:
    """Apply one scale command, or a list of them (one schedule run's batch)."""
    rt = runtime()
    valid: list[handlers.ScaleCommand] = []
    outcomes: list[str] = []
    for raw in commands if isinstance(commands, list) else [commands]:
        try:
            command = handlers.ScaleCommand.model_validate(raw)
            handlers.require_scope(rt, command.job.partition("/")[0], field="job")
        except ValidationError as error:
            outcomes.append(
                str(
                    _reject(rt, "trainscaler.scale", payload=raw, error=validation_message(error))[
                        "error"
                    ]
                )
            )
        except handlers.OutOfScope as error:
            outcomes.append(
                str(_reject(rt, "trainscaler.scale", payload=raw, error=str(error))["error"])
            )
        else:
            valid.append(command)
    # Redis errors are not caught per command: Celery retries the whole (idempotent) task.
    counted: list[ScaleResultLabel] = []
    for result in handlers.apply_scales(rt, valid):
        if result.error is None:
            counted.append(scale_result(result.outcome))
            outcomes.append(result.outcome)
        else:
            text, label = _failed(rt, result)
            counted.append(label)
            outcomes.append(text)
    rt.metrics.record_scales(counted)
    return {"outcomes": outcomes}


def _failed(rt: Runtime, result: handlers.ScaleResult) -> tuple[str, ScaleResultLabel]:
    """Dead-letter or retry a failed command: its outcome text and metric label."""
    command, error = result.command, result.error
    payload = command.model_dump(mode="json")
    if isinstance(error, PermanentScaleError):
        _reject(rt, "trainscaler.scale", payload=payload, error=f"permanent: {error}")
        # Dead-lettered: the operator's to replay, not sweep_leases's to resend.
        rt.store.settle_scale(command.job, generation=command.generation)
        return "dead-lettered", "permanent_error"
    if command.attempt >= rt.settings.scale_max_retries:
        _reject(
            rt,
            "trainscaler.scale",
            payload=payload,
            error=f"gave up after {command.attempt} retries: {error}",
        )
        rt.store.settle_scale(command.job, generation=command.generation)
        return "dead-lettered", "gave_up"
    delay = _backoff(rt, command.attempt)
    # Under way until the retry is due: sweep_leases resends it only if it is lost.
    rt.store.postpone_scale(command.job, until=rt.clock.now() + delay)
    # A retry reads the job afresh: the planner's copy it carried may be what failed.
    # ... and takes the lock itself: the one taken for the command went with the attempt.
    retry = command.model_copy(
        update={
            "attempt": command.attempt + 1,
            "observed": None,
            "lock": None,
            "locked_at": None,
            "record": None,
        }
    )
    # Only this command is retried, on its own, after the backoff (and re-reads first).
    _send_scales([retry], countdown=delay)
    return f"retrying in {delay:.2f}s: {error}", "transient_error"


def _backoff(rt: Runtime, retries: int) -> float:
    """Exponential backoff with full jitter, capped."""
    ceiling = min(rt.settings.retry_backoff_max, rt.settings.retry_backoff_base * 2**retries)
    return random.uniform(ceiling / 2, ceiling)


@_task(name="trainscaler.autoscale", bind=True)
def autoscale(self: Task) -> dict[str, Any]:
    owner = f"{handlers.owner_id()}:{self.request.id}"
    return handlers.autoscale_once(runtime(), send_scale=_send_scale, owner=owner)


@_task(name="trainscaler.finish")
def finish(job: Any = None, reply_to: Any = None) -> dict[str, Any]:
    """``reply_to``: a reply key its sender waits on (the API's), answered once finished."""
    rt = runtime()
    try:
        key = FinishRequest.model_validate({"job": job}).job
        handlers.require_scope(rt, key.partition("/")[0], field="job")
    except ValidationError as error:
        return _reject(rt, "trainscaler.finish", payload=job, error=validation_message(error))
    except handlers.OutOfScope as error:
        return _reject(rt, "trainscaler.finish", payload=job, error=str(error))
    if reply_to is not None and not (isinstance(reply_to, str) and is_reply_key(rt, reply_to)):
        # Answers go to reply keys only, never to a key a sender names (a queue...).
        return _reject(
            rt, "trainscaler.finish", payload=[job, reply_to], error="reply_to: not a reply key"
        )
    return handlers.finish_job(rt, key, reply_to=reply_to)


@_task(name="trainscaler.sweep_leases")
def sweep_leases() -> dict[str, Any]:
    rt = runtime()
    result = handlers.sweep_leases(rt)
    if result["pending"]:
        # Unconditionally: a trigger claimed by a worker that died before sending
        # its schedule task would otherwise hold everything back for the flag's TTL.
        schedule.apply_async()
    lost = handlers.lost_scales(rt, now=rt.clock.now())
    if lost:
        _send_scales(lost)
    return {**result, "resent_scales": len(lost)}


@_task(name="trainscaler.noop")
def noop() -> None:
    """Does nothing: the benchmark's ceiling for one task round trip on this broker."""
