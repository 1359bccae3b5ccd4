"""``trainscaler run``: the whole system on loopback, in one command.

The one place that composes the simulated parts (``trainscaler_sim``) with the runtime
(``workers``). It starts, each as a supervised child in its own process
group: an embedded ``redis-server`` (unless a Redis URL is configured), the
loopback Kubernetes API server with simulated GPU nodes (unless ``--cluster
kubeconfig``), a Celery worker, beat, the HTTP API and Flower; installs the
ElasticJob CRD; then drives a mix of simulated training jobs and shows them
live. Children get their configuration only through ``TRAINSCALER_*``
variables built from one ``Settings``. Secure by default: the embedded Redis
gets a generated password (in a 0600 config file, still on loopback), Flower
generated basic-auth credentials, the API a generated token; all three are
in the run's env file (0600). SIGINT / SIGTERM, or ``--duration``,
stop every child and exit 0; a child that dies on its own stops the run with
exit code 1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Annotated, Any

import typer
from kubernetes import client as k8s_client
from rich.console import Console

from scheduler_core.models import ScalingDecision
from trainscaler_sim.embedded.api_client import TrainscalerApi
from trainscaler_sim.embedded.childenv import child_env
from trainscaler_sim.embedded.children import start_all
from trainscaler_sim.embedded.console import (
    Stopper,
    Watch,
    closing_line,
    printer,
    quiet,
    stop_on_signals,
    watch,
)
from trainscaler_sim.embedded.curves import EpochCurve, curve_for
from trainscaler_sim.embedded.driver import DEFAULT_MIX, JobDriver
from trainscaler_sim.embedded.kube import ClusterJobs, ElasticJobKind
from trainscaler_sim.embedded.parameter_server import ParallelismBoard, ParameterServer
from trainscaler_sim.embedded.supervisor import ChildFailedError, StartCancelledError, Supervisor
from trainscaler_sim.embedded.table import JobsLayout, StatusPoller
from trainscaler_sim.trace.runner import default_data_dir
from workers.adapters.kubernetes.client import load_configuration
from workers.adapters.kubernetes.crd import GROUP, KIND, PLURAL, VERSION, install_crd
from workers.commands.jobs_view import JOB_COLUMNS, job_row
from workers.commands.run_plan import (
    ClusterMode,
    Plan,
    child_layout,
    discovered,
    plan_run,
    write_client_env,
)
from workers.discovery import remove_discovered, write_discovered
from workers.settings import Settings
from workers.wiring import Runtime


def cli_path() -> str:
    """The absolute path of this ``trainscaler`` command, so a printed hint works verbatim."""
    beside = Path(sys.executable).with_name("trainscaler")
    if beside.exists():
        return str(beside)
    return shutil.which("trainscaler") or f"{sys.executable} -m workers.cli"


def _clean_up(
    folder: Path,
    *,
    created: bool,
    exit_code: int,
    say: Callable[[str], None],
    loopback_kubeconfig: Path | None,
) -> None:
    """A run folder we created goes away; otherwise its logs stay, without credentials."""
    if created and exit_code == 0:
        shutil.rmtree(folder, ignore_errors=True)
        return
    if loopback_kubeconfig is not None:
        with suppress(OSError):
            loopback_kubeconfig.unlink()  # it holds the loopback cluster's credentials
    if exit_code != 0:
        say(f"logs kept in {folder / 'logs'}")


def _data_dir(option: Path | None, settings: Settings) -> Path:
    if option is not None:
        return option
    if settings.pollux_data_dir:
        return Path(settings.pollux_data_dir)
    return default_data_dir()


def _kube_api_client(settings: Settings) -> Any:
    return k8s_client.ApiClient(configuration=load_configuration(settings))


def _curves(data_dir: Path | None) -> dict[str, EpochCurve]:
    loaded: dict[str, Any] = {}
    return {
        spec.name: curve_for(spec.application, spec.batch_size, data_dir=data_dir, loaded=loaded)
        for spec in DEFAULT_MIX
    }


def _wait_first_autoscale(runtime: Runtime, stopper: Stopper, *, timeout: float) -> float | None:
    """Seconds waited until an autoscale run finished without error (None on timeout)."""
    started = time.monotonic()
    while not stopper.event.is_set() and time.monotonic() - started < timeout:
        with suppress(Exception):  # Redis may refuse while starting; retried until timeout
            if any(not run.note for run in runtime.store.runs(limit=20)):
                return time.monotonic() - started
        stopper.event.wait(0.2)
    return None


def _decision_summary(decision: ScalingDecision, *, source: str = "autoscale") -> dict[str, Any]:
    return {
        "job": decision.job,
        "source": source,
        "current": decision.current,
        "target": decision.target,
        "rule": decision.reason.rule,
        "numbers": dict(decision.reason.numbers),
    }


def _summary(
    plan: Plan,
    driver: JobDriver | None,
    *,
    runtime: Runtime,
    started_s: float | None,
    children: dict[str, int],
) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    for view in driver.views() if driver is not None else []:
        applied = None
        decisions: list[dict[str, Any]] = []
        with suppress(Exception):
            applied = runtime.store.applied(view.key) if view.key else None
            records = runtime.store.decisions(view.key, limit=200) if view.key else []
            decisions = [_decision_summary(r.decision, source=r.source) for r in reversed(records)]
        jobs[view.name] = {
            "key": view.key,
            "kind": view.mode,
            "curve": view.curve_source,
            "scale_events": view.scale_events,
            "replica_history": view.history,
            "epochs": view.epoch,
            "epoch_restarts": view.restarts,
            "state": view.state,
            "error": view.error,
            "applied": applied.model_dump(mode="json") if applied is not None else None,
            # Oldest first, each with its reason's rule and numbers.
            "decisions": decisions,
            # What the job told trainscaler: each report as sent, oldest first.
            "submitted_at": view.submitted_at,
            "reports": view.reports,
        }
    dead: int | None = None
    with suppress(Exception):
        dead = runtime.dead_letters.count()
    autoscale_runs: int | None = None
    plans: list[list[dict[str, Any]]] = []
    plan_times: list[float] = []
    with suppress(Exception):
        autoscale_runs = len(runtime.store.runs(limit=1000))
        history = list(reversed(runtime.store.plan_history(limit=200)))
        plans = [[_decision_summary(d) for d in record.plan.decisions] for record in history]
        plan_times = [record.at for record in history]
    return {
        "cluster_policy": plan.settings.cluster_policy,
        # Every stored cluster plan, oldest first: each job's decision with its numbers.
        "plans": plans,
        # When each plan was made (the runtime's clock), same order.
        "plan_times": plan_times,
        "api_url": plan.api_url,
        "flower_url": plan.flower_url,
        "run_dir": str(plan.run_dir),
        "startup_s": started_s,
        "children": children,
        "ports": {
            name: port
            for name, port in (
                ("api", plan.api_port),
                ("flower", plan.flower_port),
                ("redis", plan.redis_port),
                ("kubernetes", plan.kube_port),
            )
            if port
        },
        "autoscale_runs": autoscale_runs,
        "dead_letters": dead,
        "jobs": jobs,
    }


def run(
    duration: Annotated[
        float | None,
        typer.Option("--duration", min=1, help="Stop by itself after this many seconds (exit 0)."),
    ] = None,
    cluster: Annotated[
        ClusterMode,
        typer.Option(
            "--cluster",
            help="loopback: simulated API server and nodes; kubeconfig: the cluster KUBECONFIG names.",
        ),
    ] = ClusterMode.LOOPBACK,
    *,
    table: Annotated[
        bool, typer.Option("--table/--no-table", help="Live table, or plain log lines.")
    ] = True,
    api_port: Annotated[
        int, typer.Option(min=0, max=65535, help="API port; a free one if taken.")
    ] = 8000,
    flower_port: Annotated[
        int, typer.Option(min=0, max=65535, help="Flower port; a free one if taken.")
    ] = 5555,
    nodes: Annotated[int, typer.Option(min=1, help="Simulated nodes (loopback).")] = 4,
    gpus: Annotated[int, typer.Option(min=1, help="GPUs per simulated node (loopback).")] = 4,
    jobs: Annotated[
        bool, typer.Option("--jobs/--no-jobs", help="Submit the simulated job mix.")
    ] = True,
    autoscale_interval: Annotated[
        float, typer.Option(min=0.5, help="Seconds between autoscale runs.")
    ] = 5.0,
    epoch_seconds: Annotated[
        float, typer.Option(min=0.2, help="Wall seconds of a simulated epoch.")
    ] = 3.0,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Pollux traces (default: TRAINSCALER_POLLUX_DATA_DIR, else ../shared/data/pollux "
            "beside the repo); synthetic curves when the folder is absent."
        ),
    ] = None,
    summary: Annotated[Path | None, typer.Option(help="Write a JSON summary here on exit.")] = None,
    run_dir: Annotated[
        Path | None, typer.Option(help="Logs and state (default: a new temp dir).")
    ] = None,
) -> None:
    """Run the whole system on loopback: Redis, Kubernetes, worker, beat, API, Flower, jobs."""
    console = Console(stderr=False)
    if not console.is_terminal:
        # Piped or logged: whole rows (reasons included), not 80 columns.
        console = Console(stderr=False, width=240)
    say = printer(console, table=table)
    began = time.monotonic()
    stopper = Stopper()
    folder = run_dir or Path(tempfile.mkdtemp(prefix="trainscaler-run-"))
    folder.mkdir(parents=True, exist_ok=True)
    # Its own settings only: never the connection details of another running system.
    base = Settings(discover=False)
    discovery_file = Path(base.discovery_file)
    plan = plan_run(
        base,
        run_dir=folder,
        cluster=cluster,
        api_port=api_port,
        flower_port=flower_port,
        autoscale_interval=autoscale_interval,
    )
    supervisor = Supervisor(log_dir=folder / "logs")
    runtime = Runtime(plan.settings)
    driver: JobDriver | None = None
    poller: StatusPoller | None = None
    ps: ParameterServer | None = None
    api: TrainscalerApi | None = None
    startup_s: float | None = None
    exit_code = 0
    with stop_on_signals(stopper, supervisor):
        try:
            say(f"starting trainscaler ({cluster.value} cluster); logs in {supervisor.log_dir}")
            for note in plan.notes:
                say(note)
            inherited = dict(os.environ)  # passed through, never interpreted here
            env = child_env(inherited, plan.settings.model_dump(mode="json"))
            start_all(supervisor, child_layout(plan, nodes=nodes, gpus=gpus), env=env)
            kube = _kube_api_client(plan.settings)
            install_crd(kube)
            cluster_jobs = ClusterJobs(
                kube,
                kind=ElasticJobKind(GROUP, VERSION, PLURAL, KIND),
                gpu_resource=plan.settings.gpu_resource,
            )
            api = TrainscalerApi(plan.api_url, token=plan.settings.api_token, timeout=15.0)
            board = ParallelismBoard()
            ps = ParameterServer(board).start()
            if jobs:
                traces = _data_dir(data_dir, plan.settings)
                folder_or_none = traces if (traces / "traces").is_dir() else None
                driver = JobDriver(
                    DEFAULT_MIX,
                    curves=_curves(folder_or_none),
                    api=api,
                    cluster=cluster_jobs,
                    board=board,
                    ps_url=ps.url,
                    epoch_wall_s=epoch_seconds,
                    # Next to the live table, failures show in its rows instead.
                    log=say if not table else quiet,
                )
                driver.start()
            # Every job in the cluster, not only the demo's: the CLI's view of jobs.
            poller = StatusPoller(driver, api=api)
            poller.start()
            waited = _wait_first_autoscale(runtime, stopper, timeout=120)
            if waited is not None:
                startup_s = time.monotonic() - began
            say(f"Flower: {plan.flower_url}")
            say(f"API:    {plan.api_url}  (docs {plan.api_url}/docs)")
            env_file = write_client_env(plan)
            write_discovered(discovery_file, discovered(plan))
            cli = cli_path()
            say(f"CLI:    {cli} jobs   (also status, plan, dead-letters list)")
            say(f"        connection details in {discovery_file}; {cli} env prints them as exports")
            say(
                f"        env file for `source`: {env_file} (Flower's basic auth is TRAINSCALER_FLOWER_BASIC_AUTH)"
            )
            say(
                f"ready in {startup_s:.1f}s (first autoscale succeeded)"
                if startup_s is not None
                else "no autoscale run succeeded within 120s"
            )
            urls = {"Flower": plan.flower_url, "API": plan.api_url}
            w = Watch(
                supervisor,
                stopper,
                driver,
                poller,
                urls,
                began=began,
                layout=JobsLayout(JOB_COLUMNS, job_row),
                duration=duration,
            )
            exit_code = watch(w, table=table, console=console, say=say)
        except StartCancelledError:
            say(f"stopping: {stopper.reason} during start-up")
        except ChildFailedError as error:
            say(f"error: {error}")
            exit_code = 1
        finally:
            if driver is not None:
                driver.stop()
            if poller is not None:
                poller.stop()
            report = _summary(
                plan, driver, runtime=runtime, started_s=startup_s, children=supervisor.pids()
            )
            if summary is not None:
                summary.write_text(json.dumps(report, indent=2))
            remove_discovered(discovery_file, pid=os.getpid())
            say(closing_line(report))
            if ps is not None:
                ps.stop()
            if api is not None:
                api.close()
            for line in supervisor.stop_all():
                say(line)
            _clean_up(
                folder,
                created=run_dir is None,
                exit_code=exit_code,
                say=say,
                loopback_kubeconfig=(
                    Path(plan.settings.kubeconfig)
                    if plan.loopback_cluster and plan.settings.kubeconfig
                    else None
                ),
            )
    raise typer.Exit(exit_code)


def register(app: typer.Typer) -> None:
    app.command(name="run")(run)
