"""Another terminal finds the running embedded system with nothing exported.

``trainscaler run`` (with its own ``HOME``) leaves its connection details in
the per-user discovery file; the client commands and ``celery -A workers``,
started here with an environment of ``HOME``, ``PATH`` and ``LANG`` only, use
them. The printed hint runs as printed. A train request without ``ps_url``
is refused with what is missing. On exit the discovery file is gone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _bare_env(home: Path) -> dict[str, str]:
    """What a fresh login shell has: no TRAINSCALER_*, no KUBECONFIG, no venv on PATH."""
    return {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _run(argv: list[str], home: Path, *, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=_bare_env(home),
        cwd=home,  # not the repository: nothing found by accident
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_client_commands_find_the_running_system_with_nothing_exported(
    embedded_run, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    run = embedded_run(duration=360, home=home)
    hint = run.wait_line(r"^CLI:\s+(\S+) jobs", timeout=240)
    cli = hint.group(1)
    assert Path(cli).is_absolute() and os.access(cli, os.X_OK), cli
    run.wait_line(r"^ready in ", timeout=60)

    discovery = run.discovery_file
    assert stat.S_IMODE(discovery.stat().st_mode) == 0o600
    found = json.loads(discovery.read_text())
    assert set(found["settings"]) >= {"api_url", "api_token", "redis_url", "kubeconfig"}

    # The printed hint, verbatim, from a shell with nothing exported.
    jobs = _run(["sh", "-c", f"{cli} jobs"], home)
    assert jobs.returncode == 0, jobs.stderr
    for name in ("cifar10-ej", "imagenet-ej", "yolov3-ej", "ncf-api", "bert-api"):
        assert name in jobs.stdout, jobs.stdout
    print(jobs.stdout)  # the closing note quotes it

    listed = json.loads(_run([cli, "jobs", "--json"], home).stdout)
    by_name = {j["name"]: j for j in listed}
    cifar = by_name["cifar10-ej"]
    # The demo's ElasticJobs name no policy: the cluster policy's (goodput by default).
    assert (cifar["policy"], cifar["min_replicas"], cifar["max_replicas"]) == ("goodput", 1, 6)
    assert cifar["fulfillment"] is not None and cifar["state"] in ("running", "waiting")

    status = _run([cli, "status"], home)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith("healthy"), status.stdout
    assert "oldest -s" not in status.stdout

    # The planner's newest round (the first one may still be on its way).
    plan = wait_for(
        lambda: (done := _run([cli, "plan"], home)).returncode == 0 and done,
        timeout=120,
        interval=2,
        what="trainscaler plan after the first autoscale round",
    )
    assert re.search(r"cluster: 4 nodes, GPU \d+/16", plan.stdout), plan.stdout

    letters = _run([cli, "dead-letters", "list"], home)
    assert letters.returncode == 0, letters.stderr
    assert "dead letter(s)" in letters.stdout

    exports = _run([cli, "env"], home)
    assert exports.returncode == 0, exports.stderr
    assert f"export TRAINSCALER_API_URL={shlex.quote(found['settings']['api_url'])}" in (
        exports.stdout
    )

    celery = Path(sys.executable).with_name("celery")
    ping = _run([str(celery), "-A", "workers", "inspect", "ping", "--timeout", "20"], home)
    assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr

    # A train request that could never be scaled is refused, saying what is missing.
    refused = _run(
        [cli, "submit", "--model-type", "resnet", "--dataset", "cifar10",
         "--batch-size", "64", "--epochs", "5"],
        home,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout
    assert "HTTP 422: no scaling target" in refused.stderr, refused.stderr
    assert "no ps_url" in refused.stderr and "no ElasticJob" in refused.stderr
    after = _run([cli, "status"], home)
    assert after.returncode == 0, after.stdout  # refused up front: nothing dead-lettered

    run.process.send_signal(signal.SIGINT)
    assert run.wait_exit(timeout=90) == 0, run.output()[-4000:]
    assert not discovery.exists(), "the discovery file outlived its run"
    gone = _run([cli, "jobs"], home)
    assert gone.returncode == 1
    assert "set TRAINSCALER_API_URL or --api-url" in gone.stderr
    assert "no running embedded system found" in gone.stderr
    assert run.leftovers_after() == []
