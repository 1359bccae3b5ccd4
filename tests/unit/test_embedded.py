"""The embedded system's parts that run without the runtime: ports, supervisor,
curves, child environments, the parameter server and the table's helpers."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from trainscaler_sim.embedded.childenv import child_env, settings_env
from trainscaler_sim.embedded.children import ChildLayout, infrastructure
from trainscaler_sim.embedded.children import runtime as runtime_children
from trainscaler_sim.embedded.curves import SYNTHETIC, SyntheticCurve, TraceCurve, curve_for
from trainscaler_sim.embedded.driver import JobView, train_task
from trainscaler_sim.embedded.parameter_server import ParallelismBoard, ParameterServer
from trainscaler_sim.embedded.ports import choose_port, free_port, port_in_use, port_is_free
from trainscaler_sim.embedded.supervisor import (
    ChildFailedError,
    ChildSpec,
    StartCancelledError,
    Supervisor,
    group_alive,
    log_ready,
)
from trainscaler_sim.embedded.table import (
    ClusterStatus,
    GpuUse,
    JobsLayout,
    change_lines,
    gpu_use,
    headline,
    render_table,
    split_reason,
)
from trainscaler_sim.trace.traces import ApplicationTrace
from workers.commands.jobs_view import JOB_COLUMNS, job_row
from workers.settings import Settings

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux"

pytestmark = pytest.mark.timeout(60)


# --- ports -----------------------------------------------------------------------


def test_choose_port_keeps_a_free_wanted_port_and_replaces_a_taken_one() -> None:
    wanted = free_port()
    assert choose_port(wanted) == wanted
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        assert not port_is_free(taken)
        assert port_in_use(taken)
        replacement = choose_port(taken)
        assert replacement != taken and port_is_free(replacement)
    assert choose_port(0) > 0 and choose_port(None) > 0


# --- supervisor --------------------------------------------------------------------

# A child that starts a grandchild in its own group, says so, and waits.
FAMILY = (
    "import subprocess, sys, time, signal\n"
    "if len(sys.argv) > 1: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print('up', grandchild.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _grandchild_pid(log: Path) -> int:
    return int(log.read_text().split("up", 1)[1].split()[0])


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone_within(pid: int, *, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_all_ends_the_whole_process_group(tmp_path: Path) -> None:
    supervisor = Supervisor(log_dir=tmp_path)
    log = tmp_path / "family.log"
    spec = ChildSpec(
        "family", [sys.executable, "-c", FAMILY], {}, ready=log_ready(log, "up"), ready_timeout=20
    )
    child = supervisor.start(spec)
    grandchild = _grandchild_pid(log)
    assert child.alive() and _pid_alive(grandchild)
    notes = supervisor.stop_all()
    assert notes == [f"family (pid {child.pid}) stopped"]
    assert not group_alive(child.pid)
    assert _gone_within(grandchild, timeout=10)


def test_a_child_ignoring_sigterm_is_killed_after_its_stop_timeout(tmp_path: Path) -> None:
    supervisor = Supervisor(log_dir=tmp_path)
    log = tmp_path / "stubborn.log"
    spec = ChildSpec(
        "stubborn",
        [sys.executable, "-c", FAMILY, "ignore-term"],
        {},
        ready=log_ready(log, "up"),
        stop_timeout=1.0,
    )
    child = supervisor.start(spec)
    grandchild = _grandchild_pid(log)
    assert supervisor.stop_all() == [f"stubborn (pid {child.pid}) killed after 1s"]
    assert not child.alive()
    # SIGKILL is delivered asynchronously: wait (bounded) instead of checking one instant.
    assert _gone_within(grandchild, timeout=10), f"grandchild {grandchild} outlived SIGKILL"


ORPHANING_PARENT = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from trainscaler_sim.embedded.supervisor import ChildSpec, Supervisor\n"
    "supervisor = Supervisor(log_dir=Path(sys.argv[1]))\n"
    "child = supervisor.start(ChildSpec('sleeper', [sys.executable, '-c', "
    "'import time; time.sleep(120)'], {}), wait=False)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def test_children_die_with_a_supervisor_killed_by_sigkill(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHANING_PARENT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _pid_alive(child)
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _pid_alive(child)
    finally:
        parent.kill()
        parent.wait(timeout=10)


def test_a_child_that_exits_before_ready_fails_with_its_log(tmp_path: Path) -> None:
    supervisor = Supervisor(log_dir=tmp_path)
    spec = ChildSpec(
        "broken",
        [sys.executable, "-c", "print('no config here'); raise SystemExit(3)"],
        {},
        ready=lambda: False,
    )
    with pytest.raises(ChildFailedError, match=r"broken exited with code 3(.|\n)*no config here"):
        supervisor.start(spec)
    supervisor.stop_all()


def test_a_child_not_ready_in_time_fails(tmp_path: Path) -> None:
    with Supervisor(log_dir=tmp_path) as supervisor:
        spec = ChildSpec(
            "slow",
            [sys.executable, "-c", "import time; time.sleep(30)"],
            {},
            ready=lambda: False,
            ready_timeout=0.5,
        )
        with pytest.raises(ChildFailedError, match=r"slow not ready within"):
            supervisor.start(spec)
        assert [c.name for c in supervisor.children] == ["slow"]
    assert supervisor.children == []


def test_cancel_ends_a_start_up_wait_early(tmp_path: Path) -> None:
    with Supervisor(log_dir=tmp_path) as supervisor:
        spec = ChildSpec(
            "waiting",
            [sys.executable, "-c", "import time; time.sleep(30)"],
            {},
            ready=lambda: False,
            ready_timeout=30,
        )
        timer = threading.Timer(0.3, supervisor.cancel.set)
        timer.start()
        began = time.monotonic()
        with pytest.raises(StartCancelledError, match="waiting"):
            supervisor.start(spec)
        assert time.monotonic() - began < 10
        timer.join()


def test_dead_lists_children_that_exited_on_their_own(tmp_path: Path) -> None:
    with Supervisor(log_dir=tmp_path) as supervisor:
        quick = supervisor.start(ChildSpec("quick", [sys.executable, "-c", "pass"], {}), wait=False)
        quick.process.wait(timeout=20)
        assert [c.name for c in supervisor.dead()] == ["quick"]


# --- curves ----------------------------------------------------------------------------


def test_synthetic_curves_speed_up_then_flatten() -> None:
    curve = SyntheticCurve(single_replica_s=100.0, serial_fraction=0.1, sync_s_per_replica=1.0)
    assert curve.epoch_seconds(1) == pytest.approx(100.0)
    assert curve.epoch_seconds(2) == pytest.approx(100 * (0.1 + 0.45) + 1.0)
    assert curve.epoch_seconds(0) == curve.epoch_seconds(1)
    for name, synthetic in SYNTHETIC.items():
        assert synthetic.epoch_seconds(2) < synthetic.epoch_seconds(1), name


def test_without_the_data_folder_curves_are_synthetic(tmp_path: Path) -> None:
    assert curve_for("cifar10", 512, data_dir=tmp_path) is SYNTHETIC["cifar10"]
    assert curve_for("cifar10", 512, data_dir=None).source == "synthetic"
    with pytest.raises(ValueError, match="no curve for application 'mnist'"):
        curve_for("mnist", 64, data_dir=None)


@pytest.mark.skipif(not (DATA_DIR / "traces").is_dir(), reason="no Pollux traces at ../shared")
def test_trace_curves_come_from_the_measured_iteration_times() -> None:
    loaded: dict[str, ApplicationTrace] = {}
    curve = curve_for("cifar10", 512, data_dir=DATA_DIR, loaded=loaded)
    assert isinstance(curve, TraceCurve) and curve.source == "trace:cifar10"
    assert curve.placement(6) == [4, 2] and curve.placement(8) == [4, 4]
    iterations = curve.trace.epoch_ends(512)[0]
    assert curve.epoch_seconds(2) == pytest.approx(
        curve.trace.iteration_time([2], 512) * iterations
    )
    assert curve.epoch_seconds(4) < curve.epoch_seconds(1)
    other = curve_for("cifar10", 1024, data_dir=DATA_DIR, loaded=loaded)
    assert isinstance(other, TraceCurve) and other.trace is curve.trace


# --- child environment -------------------------------------------------------------------


def test_children_see_exactly_the_parents_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:1234/0",
        autoscale_interval=2.5,
        api_auth_disabled=True,
        kubeconfig="/tmp/kc",
        namespaces=("team-b", "team-a"),
    )
    inherited = {"PATH": "/bin", "TRAINSCALER_SCALER": "recording", "HOME": "/root"}
    env = child_env(inherited, settings.model_dump(mode="json"), extra={"FLOWER_X": "1"})
    assert env["PATH"] == "/bin" and env["FLOWER_X"] == "1"
    assert env["TRAINSCALER_SCALER"] == "kubernetes"  # the parent's setting, not the inherited
    assert env["TRAINSCALER_AUTOSCALE_INTERVAL"] == "2.5"
    assert "TRAINSCALER_KUBE_NAMESPACE" not in env
    assert json.loads(env["TRAINSCALER_NAMESPACES"]) == ["team-a", "team-b"]
    for key in [k for k in os.environ if k.startswith("TRAINSCALER_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("TRAINSCALER_"):
            monkeypatch.setenv(key, value)
    assert Settings() == settings


def test_settings_env_writes_json_for_non_strings() -> None:
    assert settings_env({"a": 1, "b": True, "c": "x", "d": None, "e": 0.5}) == {
        "TRAINSCALER_A": "1",
        "TRAINSCALER_B": "true",
        "TRAINSCALER_C": "x",
        "TRAINSCALER_E": "0.5",
    }


# --- parameter server ----------------------------------------------------------------------


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_parameter_server_keeps_the_newest_parallelism_per_job() -> None:
    board = ParallelismBoard()
    server = ParameterServer(board).start()
    try:
        task = train_task("abc123", {"model_type": "m"}, parallelism=3, elapsed=None)
        assert _post(f"{server.url}/start", json.dumps(task).encode()) == 200
        assert board.get("abc123") == 3
        update = train_task("abc123", {"model_type": "m"}, parallelism=5, elapsed=1.5)
        assert _post(f"{server.url}/update/abc123", json.dumps(update).encode()) == 200
        assert board.wait_for("abc123", timeout=1) == 5 and board.calls("abc123") == 2
        assert _post(f"{server.url}/update/x", b"{not json") == 400
        assert _post(f"{server.url}/update/x", b'{"job_id": "x"}') == 422
        assert board.get("x") is None
        assert board.wait_for("nobody", timeout=0.05) is None
    finally:
        server.stop()


# --- table helpers ---------------------------------------------------------------------------


def _summary(name: str, state: str, **extra: object) -> Mapping[str, Any]:
    return {"job": f"default/{name}", "name": name, "state": state, **extra}


def _text_of(table: Table) -> str:
    console = Console(width=300, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_the_live_table_shows_every_job_the_api_lists_with_the_clis_row() -> None:
    jobs = [
        _summary("cifar10-ej", "running", policy="edl", last_reason="edl.scale_up: grew 1 -> 5"),
        _summary("added-by-kubectl", "waiting", waiting_for="its pods to be scheduled"),
        _summary("ncf-api", "finished"),
    ]
    status = ClusterStatus(jobs=jobs, gpu=GpuUse(used=4, total=16, nodes=4))
    layout = JobsLayout(JOB_COLUMNS, job_row)
    text = _text_of(render_table(status, layout=layout, urls={"API": "u"}, elapsed_s=3))
    assert "4/16 GPUs in use on 4 nodes" in text
    assert "1 running, 1 waiting, 1 finished" in text
    for name in ("cifar10-ej", "added-by-kubectl", "ncf-api"):
        assert name in text and f"default/{name}" in text
    assert "waiting for its pods to be scheduled" in text
    assert "edl.scale_up: grew 1 -> 5" in text


def test_the_title_says_when_nothing_is_running() -> None:
    assert headline([]) == "no jobs yet"
    done = [_summary("a", "finished"), _summary("b", "finished")]
    assert headline(done) == "nothing running: all 2 jobs finished"
    assert headline([*done, _summary("c", "waiting")]) == "nothing running: 1 waiting, 2 finished"


def test_gpu_use_is_the_plan_answers_cluster() -> None:
    plan = {"cluster": {"gpu_limit": 4, "gpu_total": 16, "node_count": 4}}
    assert gpu_use(plan) == GpuUse(used=4, total=16, nodes=4)
    assert gpu_use(None) is None
    assert split_reason("edl.scale_up: grew: a lot") == ("edl.scale_up", "grew: a lot")


def test_change_lines_report_only_changes() -> None:
    view = JobView("j", "train", "ncf", 1, 4, "synthetic", desired=2, ready=2, state="training")
    previous: dict[str, tuple[object, ...]] = {}
    first = change_lines([view], previous)
    assert len(first) == 1 and "replicas=2" in first[0] and "fulfillment=33%" in first[0]
    assert change_lines([view], previous) == []
    view.desired = 3
    assert "replicas=3" in change_lines([view], previous)[0]


# --- child command lines ------------------------------------------------------------------


def test_children_follow_what_the_run_embeds(tmp_path: Path) -> None:
    env = {
        "TRAINSCALER_REDIS_URL": "redis://:pw@127.0.0.1:1/0",
        "TRAINSCALER_FLOWER_BASIC_AUTH": "admin:secret",
    }
    embedded = ChildLayout(
        run_dir=tmp_path, api_port=8001, flower_port=5556, redis_server="/bin/redis-server",
        redis_port=6390, redis_config=tmp_path / "redis.conf", kube_port=6443, nodes=2, gpus=8,
    )  # fmt: skip
    names = [spec.name for spec in infrastructure(embedded, env)]
    assert names == ["redis", "apiserver"]
    # The password comes from the 0600 config file, never the command line.
    redis_argv = infrastructure(embedded, env)[0].argv
    assert redis_argv[1] == str(tmp_path / "redis.conf") and "pw" not in " ".join(redis_argv)
    apiserver = infrastructure(embedded, env)[1]
    assert apiserver.argv[-8:] == [
        "--nodes", "2", "--gpus", "8", "--gpu-resource", "nvidia.com/gpu",
        "--kubeconfig", str(tmp_path / "kubeconfig"),
    ]  # fmt: skip
    external = ChildLayout(run_dir=tmp_path, api_port=8001, flower_port=5556)
    assert infrastructure(external, env) == []
    specs = {spec.name: spec for spec in runtime_children(external, env, log_dir=tmp_path)}
    assert list(specs) == ["worker", "beat", "api", "flower"]
    assert "--events" in specs["worker"].argv  # Flower needs task events
    assert "--port=5556" in specs["flower"].argv and "8001" in specs["api"].argv
    # Flower runs with the run's generated basic auth; nothing opens its API without it.
    assert specs["flower"].env["FLOWER_BASIC_AUTH"] == "admin:secret"
    assert all("FLOWER_UNAUTHENTICATED_API" not in s.env for s in specs.values())
    assert all(
        s.env["TRAINSCALER_REDIS_URL"] == env["TRAINSCALER_REDIS_URL"] for s in specs.values()
    )
