"""The ``trainscaler`` client commands and ``trainscaler api``, as real processes.

``trainscaler api`` serves on a free port next to a real Celery worker; the
client commands run as subprocesses against it, as a user would run them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.api_fixtures import TOKEN
from tests.integration.conftest import REPO, Procs, wait_for
from workers.adapters.redis_server import free_port
from workers.settings import Settings
from workers.wiring import Runtime

pytestmark = pytest.mark.timeout(120)

CLI = str(Path(sys.executable).with_name("trainscaler"))


@dataclass
class CliEnv:
    env: dict[str, str]
    api_url: str
    log: Path

    def run(
        self, *args: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLI, *args],
            cwd=REPO,
            env={**os.environ, **self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def served(procs: Procs, runtime_env: dict[str, str], tmp_path: Path) -> Iterator[CliEnv]:
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    env = {
        **runtime_env,
        "TRAINSCALER_FAULT_INJECTION": "false",
        "TRAINSCALER_API_TOKEN": TOKEN,
        "TRAINSCALER_API_URL": api_url,
        "TRAINSCALER_LOG_FORMAT": "json",
        # status keeps its last look beside the discovery file: this test's own.
        "TRAINSCALER_DISCOVERY_FILE": str(tmp_path / "state" / "embedded.json"),
    }
    procs.env = env
    procs.worker("cli-worker")
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        api = subprocess.Popen(  # the test's own child, stopped below
            [CLI, "api", "--port", str(port)],
            cwd=REPO,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return api.poll() is not None

        wait_for(up, timeout=30, what="trainscaler api up")
        assert api.poll() is None, log.read_text()
        yield CliEnv(env=env, api_url=api_url, log=log)
    finally:
        api.terminate()
        try:
            api.wait(timeout=15)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait(timeout=10)


def test_submit_report_jobs_status_plan(served: CliEnv) -> None:
    submitted = served.run(
        "submit", "--model-type", "resnet", "--dataset", "cifar10", "--batch-size", "64",
        "--epochs", "3", "--parallelism", "2", "--namespace", "ml", "--max-replicas", "4",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    assert job.startswith("ml/") and len(job) == len("ml/") + 12

    wait_for(
        lambda: json.loads(served.run("jobs", job, "--json").stdout)["replicas"],
        timeout=30,
        what="the job admitted",
    )
    reported = served.run("report", job, "--parallelism", "2", "--elapsed", "12.5")
    assert reported.returncode == 0, reported.stderr
    assert reported.stdout.startswith(f"{job}: use parallelism ")
    for seconds in ("11.0", "10.0"):
        again = served.run("report", job, "--parallelism", "2", "--elapsed", seconds)
        assert again.returncode == 0, again.stderr
    # Every report through the API is in the history, numbered.
    epochs = json.loads(served.run("jobs", job, "--json").stdout)["recent_epochs"]
    assert [(e["epoch"], e["epoch_time_s"]) for e in epochs] == [(3, 10.0), (2, 11.0), (1, 12.5)]

    listed = served.run("jobs")
    assert listed.returncode == 0 and job in listed.stdout
    detail = served.run("jobs", job)
    assert detail.returncode == 0 and "decisions (newest first)" in detail.stdout
    assert "12.50" in detail.stdout

    status = served.run("status")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("healthy (redis: ok, cluster: ok)")
    assert "dead letters: 0" in status.stdout

    # The planner's newest round, read through the API: none before a round runs.
    none_yet = served.run("plan")
    assert none_yet.returncode == 1 and "no autoscale round yet" in none_yet.stderr
    celery = str(Path(sys.executable).with_name("celery"))
    sent = subprocess.run(
        [celery, "-A", "workers", "call", "trainscaler.autoscale"],
        cwd=REPO, env={**os.environ, **served.env}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr

    def planned() -> subprocess.CompletedProcess[str] | None:
        done = served.run("plan", "--json")
        return done if done.returncode == 0 else None

    plan = wait_for(planned, timeout=30, what="the autoscale round's plan")
    assert plan is not None
    newest = json.loads(plan.stdout)
    assert newest["policy"] == "edl" and newest["run_id"] >= 1
    table = served.run("plan")
    assert table.returncode == 0 and "cluster: " in table.stdout, table.stderr

    # The API logged one JSON object per line, each request with its id.
    lines = [json.loads(line) for line in served.log.read_text().splitlines() if line.strip()]
    requests = [entry for entry in lines if entry.get("logger") == "workers.api.access"]
    assert requests and all(entry["request_id"] for entry in requests)


def test_status_exits_2_when_dead_letters_arrived_since_the_last_look(served: CliEnv) -> None:
    first = served.run("status")
    assert first.returncode == 0, first.stdout + first.stderr
    settings = Settings(redis_url=served.env["TRAINSCALER_REDIS_URL"], discover=False)
    Runtime(settings).dead_letters.add(task="trainscaler.submit", payload={}, error="x", at=1e12)
    grown = served.run("status")
    assert grown.returncode == 2, grown.stdout + grown.stderr
    assert "dead letters: 1, 1 new since the last look (trainscaler dead-letters list)" in (
        grown.stdout
    )
    seen = served.run("status")
    assert seen.returncode == 0, seen.stdout  # nothing new since
    assert "dead letters: 1\n" in seen.stdout


def test_errors_are_one_line_and_a_nonzero_exit(served: CliEnv) -> None:
    unknown = served.run("jobs", "no-such-job")
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "error: jobs: HTTP 404: unknown job 'no-such-job'"
    assert unknown.stdout == ""

    wrong_token = served.run("jobs", extra_env={"TRAINSCALER_API_TOKEN": "nope"})
    assert wrong_token.returncode == 1
    # The answer, the setting to change and whether an embedded system was found.
    assert wrong_token.stderr.startswith(
        "error: jobs: HTTP 401: missing or invalid bearer token; the API wants a valid bearer "
        "token: set TRAINSCALER_API_TOKEN or --token; "
    )
    assert "no running embedded system found" in wrong_token.stderr

    nowhere = served.run("status", "--api-url", f"http://127.0.0.1:{free_port()}")
    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith("error: status: cannot reach the API")
    assert "set TRAINSCALER_API_URL or --api-url" in nowhere.stderr
    assert len(nowhere.stderr.strip().splitlines()) == 1

    missing = served.run("submit", "--model-type", "x")
    assert missing.returncode == 1
    assert "missing --dataset, --batch-size, --epochs" in missing.stderr

    debug = served.run("--debug", "jobs", "no-such-job")
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_api_refuses_to_start_without_a_token(runtime_env: dict[str, str]) -> None:
    result = subprocess.run(
        [CLI, "api", "--port", str(free_port())],
        cwd=REPO,
        env={**os.environ, **runtime_env, "TRAINSCALER_API_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: the API needs a bearer token")
    assert "Traceback" not in result.stderr
