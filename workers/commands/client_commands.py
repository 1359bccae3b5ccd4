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
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from scheduler_core.models import EpochReport, TaskState, TrainOptions, TrainRequest, TrainTask
from workers.client import ApiError, CeleryClient, TrainscalerClient
from workers.settings import Settings, get_settings

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


def _client(settings: Settings, api_url: str | None, token: str | None) -> TrainscalerClient:
    return TrainscalerClient(api_url or settings.api_url, token=token or settings.api_token)


def _call(client: TrainscalerClient, what: str, call: Any) -> Any:
    """Run one API call; connection problems and error answers become one line."""
    try:
        return call()
    except ApiError as error:
        raise CommandError(f"{what}: {error}") from None
    except httpx.TransportError as error:
        raise CommandError(f"{what}: cannot reach the API: {error}") from None
    finally:
        client.close()


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


def plan(
    policy: Annotated[
        str | None, typer.Option(help="Cluster policy (default: configured).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Dry run: what the cluster planner would do now, and why. Nothing is applied."""
    # Imported here: reading the cluster needs the runtime's adapters, the other commands do not.
    from workers.api.views import preview_plan
    from workers.wiring import Runtime

    preview = preview_plan(Runtime(get_settings()), policy=policy)
    if as_json:
        _print_json(preview.model_dump(mode="json"))
        return
    cluster = preview.cluster
    table = Table(title=f"{preview.policy}: {preview.changes} change(s), nothing applied")
    for column in ("job", "current", "target", "direction", "rule", "reason"):
        table.add_column(column)
    for decision in preview.decisions:
        table.add_row(
            decision.job,
            str(decision.current),
            str(decision.target),
            decision.direction,
            decision.rule,
            decision.message,
        )
    console = _console()
    console.print(table)
    console.print(
        f"cluster: {cluster.node_count} nodes, GPU {cluster.gpu_limit}/{cluster.gpu_total}, "
        f"CPU {cluster.cpu_request_milli}/{cluster.cpu_total_milli}m, "
        f"memory {cluster.memory_request_mega}/{cluster.memory_total_mega}M"
    )


# --- submit / report ---------------------------------------------------------------------


def submit(
    model_type: Annotated[str | None, typer.Option(help="KubeML model type.")] = None,
    dataset: Annotated[str | None, typer.Option(help="Dataset name.")] = None,
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
        producer = CeleryClient(settings)
        try:
            task_id, job = producer.submit(request)
        finally:
            producer.close()
        answer: dict[str, Any] = {"job": job, "task_id": task_id, "recorded": False}
    else:
        client = _client(settings, api_url, token)
        answer = _call(client, "submit", lambda: client.train(request))
    if as_json:
        _print_json(answer)
    else:
        typer.echo(answer["job"])


def report(
    job: Annotated[str, typer.Argument(help="Job key namespace/id (or a unique id).")],
    parallelism: Annotated[int, typer.Option(min=1, help="Workers the epoch ran with.")],
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
        producer = CeleryClient(settings)
        try:
            producer.report(
                EpochReport(job=job, replicas=parallelism, epoch_time_s=elapsed, epoch=epoch)
            )
        finally:
            producer.close()
        answer: dict[str, Any] = {"job": job, "decided": False}
    else:
        client = _client(settings, api_url, token)

        def send() -> dict[str, Any]:
            detail = client.job(job)
            if detail.get("request") is None:
                raise CommandError(f"{job} has no train request on record; use --celery")
            task = TrainTask(
                job_id=str(detail["job_id"]),
                parameters=TrainRequest.model_validate(detail["request"]),
                state=TaskState(parallelism=parallelism, elapsed_time=elapsed),
            )
            return client.report(task)

        answer = _call(client, "report", send)
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
    job: Annotated[str | None, typer.Argument(help="Show one job in detail.")] = None,
    api_url: ApiUrl = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """List jobs (replicas, fulfillment, newest reason), or one job with its decisions."""
    client = _client(get_settings(), api_url, token)
    if job is not None:
        detail = _call(client, "jobs", lambda: client.job(job))
        if as_json:
            _print_json(detail)
        else:
            _print_job(detail)
        return
    summaries = _call(client, "jobs", client.jobs)
    if as_json:
        _print_json(summaries)
        return
    table = Table(title=f"{len(summaries)} job(s)")
    for column in (
        "job",
        "policy",
        "min",
        "max",
        "replicas",
        "desired",
        "fulfillment",
        "epoch s",
        "last reason",
    ):
        table.add_column(column)
    for s in summaries:
        table.add_row(
            s["job"] + (" (finished)" if s.get("finished") else ""),
            _fmt(s.get("policy")),
            _fmt(s.get("min_replicas")),
            _fmt(s.get("max_replicas")),
            _fmt(s.get("replicas")),
            _fmt(s.get("desired")),
            _fmt(s.get("fulfillment")),
            _fmt(s.get("last_epoch_time_s")),
            _fmt(s.get("last_reason")),
        )
    _console().print(table)


def _print_job(detail: dict[str, Any]) -> None:
    console = _console()
    console.print(
        f"[bold]{detail['job']}[/bold] policy={_fmt(detail.get('policy'))} "
        f"replicas={_fmt(detail.get('replicas'))} desired={_fmt(detail.get('desired'))} "
        f"range={_fmt(detail.get('min_replicas'))}..{_fmt(detail.get('max_replicas'))} "
        f"fulfillment={_fmt(detail.get('fulfillment'))} "
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


def status(api_url: ApiUrl = None, token: Token = None, as_json: AsJson = False) -> None:
    """Health of Redis and the cluster, queue depths and dead letters; exit 1 if unhealthy."""
    settings = get_settings()
    client = _client(settings, api_url, token)
    healthy, health = _call(client, "status", client.health)
    client = _client(settings, api_url, token)
    queue = _call(client, "status", client.queue)
    if as_json:
        _print_json({"healthy": healthy, "health": health, "queue": queue})
    else:
        checks = ", ".join(f"{name}: {result}" for name, result in health["checks"].items())
        typer.echo(f"{'healthy' if healthy else 'UNHEALTHY'} ({checks})")
        for name, stats in queue["queues"].items():
            typer.echo(
                f"queue {name}: depth {stats['depth']}, in flight {stats['in_flight']}, "
                f"oldest {_fmt(stats['oldest_age_s'], 1)}s"
            )
        celery = ", ".join(f"{name} {depth}" for name, depth in queue["celery"].items())
        typer.echo(f"celery queues: {celery}")
        typer.echo(f"dead letters: {queue['dead_letters']['count']}")
    if not healthy:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(name="plan")(plan)
    app.command(name="submit")(submit)
    app.command(name="report")(report)
    app.command(name="jobs")(jobs)
    app.command(name="status")(status)
