"""Client sub-commands: ``plan``, ``submit``, ``report``, ``jobs``, ``status``.

``plan`` runs the cluster planner locally over the configured cluster (a dry
run: nothing is stored or scaled). The others talk to the HTTP API
(``--api-url``, default ``TRAINSCALER_API_URL``; ``--token``, default
``TRAINSCALER_API_TOKEN``); ``submit`` and ``report`` can enqueue through
Celery directly instead (``--celery``). Tables for people, ``--json`` for
scripts; errors are one line and a non-zero exit (``--debug`` for more).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
import redis
import typer
from kombu.exceptions import KombuError
from rich.console import Console
from rich.table import Table

from scheduler_core.models import EpochReport, TaskState, TrainOptions, TrainRequest, TrainTask
from workers.client import ApiError, CeleryClient, TrainscalerClient
from workers.commands.connection import (
    api_refused,
    api_unreachable,
    redis_unreachable,
)
from workers.commands.jobs_view import fulfil_text, jobs_table, state_counts, state_text
from workers.commands.last_look import LAST_LOOK_FILE, LastLook
from workers.settings import Settings, get_settings

T = TypeVar("T")
Argument = typer.Argument

ApiUrl = Annotated[
    str | None, typer.Option("--api-url", help="The API's base URL [TRAINSCALER_API_URL].")
]
Token = Annotated[str | None, typer.Option(help="Bearer token [TRAINSCALER_API_TOKEN].")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ViaCelery = Annotated[
    bool, typer.Option("--celery", help="Enqueue through Celery directly, not the API.")
]


class CommandError(Exception):
    """A failure worth one line to the user."""


class Api:
    """The API client of one command, with the settings that explain its failures."""

    def __init__(self, settings: Settings, api_url: str | None, *, token: str | None) -> None:
        self.settings = settings
        self.url = api_url or settings.api_url
        self.client = TrainscalerClient(self.url, token=token or settings.api_token)

    def call(self, what: str, call: Callable[[TrainscalerClient], T]) -> T:
        """Run one API call; connection problems and error answers become one line."""
        try:
            return call(self.client)
        except ApiError as error:
            raise CommandError(f"{what}: {api_refused(self.settings, error)}") from None
        except httpx.TransportError as error:
            raise CommandError(
                f"{what}: {api_unreachable(self.settings, self.url, error=error)}"
            ) from None

    def close(self) -> None:
        self.client.close()


@contextmanager
def _broker(settings: Settings, what: str) -> Iterator[CeleryClient]:
    """A Celery producer; an unreachable broker is one line naming its setting."""
    producer = CeleryClient(settings)
    try:
        yield producer
    except (KombuError, redis.RedisError, OSError) as error:
        raise CommandError(f"{what}: {redis_unreachable(settings, error)}") from None
    finally:
        producer.close()


def _console() -> Console:
    console = Console()
    # Piped output keeps whole rows (job keys and reasons) instead of 80 columns.
    return console if console.is_terminal else Console(width=240)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


# --- plan -------------------------------------------------------------------------------


def plan(api_url: ApiUrl = None, token: Token = None, *, as_json: AsJson = False) -> None:
    """The planner's newest round: each decision with its reason, and the cluster it saw."""
    api = Api(get_settings(), api_url, token=token)
    try:
        newest = api.call("plan", lambda client: client.plan())
    finally:
        api.close()
    if as_json:
        _print_json(newest)
        return
    cluster = newest["cluster"]
    table = Table(
        title=f"{newest['policy']}: {newest['changes']} change(s) in round {newest['run_id']}"
    )
    for column in ("job", "current", "target", "direction", "rule", "reason"):
        table.add_column(column)
    for decision in newest["decisions"]:
        table.add_row(
            decision["job"],
            str(decision["current"]),
            str(decision["target"]),
            decision["direction"],
            decision["rule"],
            decision["message"],
        )
    console = _console()
    console.print(table)
    console.print(
        f"cluster: {cluster['node_count']} nodes, GPU {cluster['gpu_limit']}/{cluster['gpu_total']}, "
        f"CPU {cluster['cpu_request_milli']}/{cluster['cpu_total_milli']}m, "
        f"memory {cluster['memory_request_mega']}/{cluster['memory_total_mega']}M"
    )


# --- submit / report ---------------------------------------------------------------------


def submit(
    model_type: Annotated[str | None, typer.Option(help="KubeML model type.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Dataset name.")] = None,
    *,
    batch_size: Annotated[int | None, typer.Option(min=1)] = None,
    epochs: Annotated[int | None, typer.Option(min=1)] = None,
    learning_rate: Annotated[float, typer.Option(min=0)] = 0.01,
    parallelism: Annotated[int, typer.Option(min=1, help="Default parallelism.")] = 1,
    namespace: Annotated[str, typer.Option()] = "default",
    min_replicas: Annotated[int, typer.Option(min=1)] = 1,
    max_replicas: Annotated[int, typer.Option(min=1)] = 8,
    ps_url: Annotated[str | None, typer.Option(help="KubeML parameter-server URL.")] = None,
    file: Annotated[
        Path | None, typer.Option(help="A TrainRequest as JSON (replaces the options).")
    ] = None,
    celery: ViaCelery = False,
    api_url: ApiUrl = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Submit a train request (KubeML CreateTask); prints the job id."""
    if file is not None:
        request = TrainRequest.model_validate_json(file.read_text())
    else:
        missing = [
            f"--{name.replace('_', '-')}"
            for name, value in (
                ("model_type", model_type),
                ("dataset", dataset),
                ("batch_size", batch_size),
                ("epochs", epochs),
            )
            if value is None
        ]
        if missing:
            raise CommandError(f"missing {', '.join(missing)} (or give --file)")
        request = TrainRequest.model_validate(
            {
                "model_type": model_type,
                "dataset": dataset,
                "batch_size": batch_size,
                "epochs": epochs,
                "learning_rate": learning_rate,
                "options": TrainOptions(default_parallelism=parallelism),
                "namespace": namespace,
                "min_replicas": min_replicas,
                "max_replicas": max_replicas,
                "ps_url": ps_url,
            }
        )
    settings = get_settings()
    if celery:
        with _broker(settings, "submit") as producer:
            task_id, job = producer.submit(request)
        answer: dict[str, Any] = {"job": job, "task_id": task_id, "recorded": False}
    else:
        api = Api(settings, api_url, token=token)
        try:
            answer = api.call("submit", lambda client: client.train(request))
        finally:
            api.close()
    if as_json:
        _print_json(answer)
    else:
        typer.echo(answer["job"])


def report(
    job: Annotated[str, typer.Argument(help="Job key namespace/id (or a unique id).")],
    parallelism: Annotated[int, typer.Option(min=1, help="Workers the epoch ran with.")],
    *,
    elapsed: Annotated[float, typer.Option(min=0, help="Seconds the epoch took.")],
    epoch: Annotated[int | None, typer.Option(min=0, help="Epoch number (--celery).")] = None,
    celery: ViaCelery = False,
    api_url: ApiUrl = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Report an epoch (KubeML UpdateTask); prints the parallelism to use next."""
    if elapsed <= 0:
        raise CommandError("--elapsed must be > 0")
    settings = get_settings()
    if celery:
        if "/" not in job:
            raise CommandError("with --celery, give the full job key namespace/id")
        with _broker(settings, "report") as producer:
            producer.report(
                EpochReport(job=job, replicas=parallelism, epoch_time_s=elapsed, epoch=epoch)
            )
        answer: dict[str, Any] = {"job": job, "decided": False}
    else:
        api = Api(settings, api_url, token=token)

        def send(client: TrainscalerClient) -> dict[str, Any]:
            detail = client.job(job)
            if detail.get("request") is None:
                raise CommandError(f"{job} has no train request on record; use --celery")
            task = TrainTask(
                job_id=str(detail["job_id"]),
                parameters=TrainRequest.model_validate(detail["request"]),
                state=TaskState(parallelism=parallelism, elapsed_time=elapsed),
            )
            return client.report(task)

        try:
            answer = api.call("report", send)
        finally:
            api.close()
    if as_json:
        _print_json(answer)
    elif answer.get("decided"):
        reason = answer.get("reason") or {}
        typer.echo(
            f"{answer['job']}: use parallelism {answer['parallelism']}"
            + (f" ({reason.get('rule')}: {reason.get('message')})" if reason else "")
        )
    else:
        typer.echo(f"{answer['job']}: queued, not decided yet")


# --- jobs / status ---------------------------------------------------------------------------


def jobs(
    job: Annotated[str | None, Argument(help="Show one job in detail.")] = None,
    api_url: ApiUrl = None,
    *,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List jobs (name, replicas, fulfillment, state, newest reason), or one job in detail."""
    api = Api(get_settings(), api_url, token=token)
    try:
        if job is not None:
            detail = api.call("jobs", lambda client: client.job(job))
            _print_json(detail) if as_json else _print_job(detail)
            return
        summaries = api.call("jobs", lambda client: client.jobs())
    finally:
        api.close()
    if as_json:
        _print_json(summaries)
        return
    _console().print(jobs_table(summaries))


def _print_job(detail: dict[str, Any]) -> None:
    console = _console()
    console.print(
        f"[bold]{detail.get('name') or detail['job']}[/bold] ({detail['job']}) "
        f"state={state_text(detail)} policy={_fmt(detail.get('policy'))} "
        f"replicas={_fmt(detail.get('replicas'))} desired={_fmt(detail.get('desired'))} "
        f"range={_fmt(detail.get('min_replicas'))}..{_fmt(detail.get('max_replicas'))} "
        f"fulfillment={fulfil_text(detail.get('fulfillment'))} "
        f"mean epoch={_fmt(detail.get('mean_epoch_time_s'))}s"
    )
    epochs = Table(title="recent epochs")
    for column in ("epoch", "replicas", "seconds", "epochs/h", "samples/s"):
        epochs.add_column(column)
    for e in detail.get("recent_epochs", []):
        epochs.add_row(
            _fmt(e.get("epoch")),
            _fmt(e.get("replicas")),
            _fmt(e.get("epoch_time_s")),
            _fmt(e.get("epochs_per_hour")),
            _fmt(e.get("samples_per_s")),
        )
    console.print(epochs)
    decisions = Table(title="decisions (newest first)")
    for column in ("gen", "source", "current", "target", "rule", "reason"):
        decisions.add_column(column)
    for d in detail.get("decisions", []):
        decisions.add_row(
            _fmt(d.get("generation")),
            _fmt(d.get("source")),
            _fmt(d.get("current")),
            _fmt(d.get("target")),
            d["rule"],
            d["message"],
        )
    console.print(decisions)


def _queue_line(name: str, stats: dict[str, Any]) -> str:
    age = stats.get("oldest_age_s")
    oldest = f"oldest waiting {age:.1f}s" if isinstance(age, int | float) else "none waiting"
    return f"queue {name}: depth {stats['depth']}, in flight {stats['in_flight']}, {oldest}"


def status(api_url: ApiUrl = None, token: Token = None, *, as_json: AsJson = False) -> None:
    """Health, queues, dead letters and jobs that cannot be scaled.

    Exit 1 when unhealthy; 2 when dead letters arrived since the last look (the
    previous ``status`` against this API) or some job can never be scaled.
    """
    settings = get_settings()
    api = Api(settings, api_url, token=token)
    try:
        healthy, health = api.call("status", lambda client: client.health())
        queue = api.call("status", lambda client: client.queue())
        summaries = api.call("status", lambda client: client.jobs())
    finally:
        api.close()
    seen = LastLook(Path(settings.discovery_file).with_name(LAST_LOOK_FILE))
    newest = [float(d.get("at", 0.0)) for d in queue["dead_letters"]["newest"]]
    new_letters = seen.new_since(api.url, newest)
    stuck = [s for s in summaries if not s.get("scalable", True)]
    if as_json:
        _print_json(
            {
                "healthy": healthy,
                "health": health,
                "queue": queue,
                "new_dead_letters": new_letters,
                "cannot_be_scaled": [s["job"] for s in stuck],
            }
        )
    else:
        checks = ", ".join(f"{name}: {result}" for name, result in health["checks"].items())
        typer.echo(f"{'healthy' if healthy else 'UNHEALTHY'} ({checks})")
        for name, stats in queue["queues"].items():
            typer.echo(_queue_line(name, stats))
        celery = ", ".join(f"{name} {depth}" for name, depth in queue["celery"].items())
        typer.echo(f"celery queues: {celery}")
        count = queue["dead_letters"]["count"]
        growth = f", {new_letters} new since the last look" if new_letters else ""
        hint = " (trainscaler dead-letters list)" if new_letters else ""
        typer.echo(f"dead letters: {count}{growth}{hint}")
        typer.echo(f"jobs: {len(summaries)} ({state_counts(summaries)})")
        for s in stuck:
            typer.echo(f"cannot be scaled: {s['job']} ({s.get('name')}): {state_text(s)}")
    if not healthy:
        raise typer.Exit(1)
    if new_letters or stuck:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command(name="plan")(plan)
    app.command(name="submit")(submit)
    app.command(name="report")(report)
    app.command(name="jobs")(jobs)
    app.command(name="status")(status)
