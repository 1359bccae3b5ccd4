"""Ctrl-C while ``trainscaler run`` is still starting: exit 0, nothing left running."""

from __future__ import annotations

import re
import signal
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_sigint_during_start_up_stops_everything(embedded_run) -> None:
    run = embedded_run(duration=120)
    run.wait_line(r"^starting trainscaler", timeout=30)
    # Let some children start, so there is something to stop.
    time.sleep(1.5)
    run.process.send_signal(signal.SIGINT)
    code = run.wait_exit(timeout=60)
    output = run.output()
    assert code == 0, output[-4000:]
    assert "stopping: SIGINT" in output
    assert re.search(r"^redis \(pid \d+\) (stopped|killed after)", output, re.MULTILINE), output
    assert run.leftovers_after() == [], f"processes left behind: {run.leftovers()}"
