"""Flower in headless Chromium against the embedded system, then Ctrl-C.

Starts ``trainscaler run``, checks through Flower's REST API and its pages
(rendered by Debian's chromium) that the worker is online and that
``trainscaler.autoscale`` tasks succeeded, saves a screenshot of the task
list under the test's output folder, and stops the run with SIGINT (what
Ctrl-C sends): exit code 0 and nothing left running.
"""

from __future__ import annotations

import base64
import json
import shlex
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

AUTOSCALE = "trainscaler.autoscale"


def _get_json(url: str, *, auth: str) -> Any:
    token = base64.b64encode(auth.encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:  # loopback URL the run printed
        return json.loads(response.read())


def _flower_auth(env_file: Path) -> str:
    """The run's generated ``user:password`` for Flower, from its 0600 env file."""
    assert env_file.stat().st_mode & 0o077 == 0, "the env file must be private"
    for line in env_file.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        if name == "TRAINSCALER_FLOWER_BASIC_AUTH":
            return str(shlex.split(value)[0])
    raise AssertionError("no Flower credentials in the env file")


def test_flower_shows_worker_and_autoscale_successes(embedded_run, chromium, tmp_path) -> None:
    run = embedded_run(duration=150)
    flower = run.wait_line(r"^Flower: (http://127\.0\.0\.1:\d+)$", timeout=90).group(1)
    env_file = Path(run.wait_line(r"env file for `source`: (\S+) ", timeout=60).group(1))
    run.wait_line(r"^ready in ", timeout=60)
    auth = _flower_auth(env_file)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{flower}/api/workers", timeout=10)
    assert refused.value.code == 401  # no credentials, no Flower
    browser = flower.replace("http://", f"http://{auth}@")

    online = wait_for(
        lambda: {
            w: up
            for w, up in _get_json(f"{flower}/api/workers?status=true", auth=auth).items()
            if up
        },
        timeout=30,
        what="an online worker in Flower's /api/workers",
    )
    worker = next(iter(online))
    succeeded = wait_for(
        lambda: _get_json(
            f"{flower}/api/tasks?taskname={AUTOSCALE}&state=SUCCESS&limit=5", auth=auth
        ),
        timeout=60,
        what=f"a successful {AUTOSCALE} task in Flower's /api/tasks",
    )
    task_id, task = next(iter(succeeded.items()))
    assert task["name"] == AUTOSCALE and task["state"] == "SUCCESS"

    workers_page = chromium.dump_dom(f"{browser}/workers")
    assert worker in workers_page
    assert "Online" in workers_page, workers_page[-2000:]
    task_page = chromium.dump_dom(f"{browser}/task/{task_id}")
    assert AUTOSCALE in task_page and "SUCCESS" in task_page, task_page[-2000:]
    tasks_page = chromium.dump_dom(f"{browser}/tasks")
    assert "SUCCESS" in tasks_page and "trainscaler." in tasks_page

    shot = chromium.screenshot(f"{browser}/tasks", tmp_path / "flower-tasks.png")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000

    run.process.send_signal(signal.SIGINT)
    code = run.wait_exit(timeout=60)
    assert code == 0, run.output()[-4000:]
    assert "stopping: SIGINT" in run.output()
    assert run.leftovers_after() == [], f"processes left behind: {run.leftovers()}"
