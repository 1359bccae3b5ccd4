"""Flower in headless Chromium against the embedded system, then Ctrl-C.

Starts ``trainscaler run``, checks through Flower's REST API and its pages
(rendered by Debian's chromium) that the worker is online and that
``trainscaler.autoscale`` tasks succeeded, saves a screenshot of the task
list under the test's output folder, and stops the run with SIGINT (what
Ctrl-C sends): exit code 0 and nothing left running.
"""

from __future__ import annotations

import json
import signal
import urllib.request
from typing import Any

import pytest

from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

AUTOSCALE = "trainscaler.autoscale"


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # loopback URL the run printed
        return json.loads(response.read())


def test_flower_shows_worker_and_autoscale_successes(embedded_run, chromium, tmp_path) -> None:
    run = embedded_run(duration=150)
    flower = run.wait_line(r"^Flower: (http://127\.0\.0\.1:\d+)$", timeout=90).group(1)
    run.wait_line(r"^ready in ", timeout=60)

    online = wait_for(
        lambda: {w: up for w, up in _get_json(f"{flower}/api/workers?status=true").items() if up},
        timeout=30,
        what="an online worker in Flower's /api/workers",
    )
    worker = next(iter(online))
    succeeded = wait_for(
        lambda: _get_json(f"{flower}/api/tasks?taskname={AUTOSCALE}&state=SUCCESS&limit=5"),
        timeout=60,
        what=f"a successful {AUTOSCALE} task in Flower's /api/tasks",
    )
    task_id, task = next(iter(succeeded.items()))
    assert task["name"] == AUTOSCALE and task["state"] == "SUCCESS"

    workers_page = chromium.dump_dom(f"{flower}/workers")
    assert worker in workers_page
    assert "Online" in workers_page, workers_page[-2000:]
    task_page = chromium.dump_dom(f"{flower}/task/{task_id}")
    assert AUTOSCALE in task_page and "SUCCESS" in task_page, task_page[-2000:]
    tasks_page = chromium.dump_dom(f"{flower}/tasks")
    assert "SUCCESS" in tasks_page and "trainscaler." in tasks_page

    shot = chromium.screenshot(f"{flower}/tasks", tmp_path / "flower-tasks.png")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000

    run.process.send_signal(signal.SIGINT)
    code = run.wait_exit(timeout=60)
    assert code == 0, run.output()[-4000:]
    assert "stopping: SIGINT" in run.output()
    assert run.leftovers_after() == [], f"processes left behind: {run.leftovers()}"
