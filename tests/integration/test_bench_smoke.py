"""Every benchmark still runs to its verdict, at its smallest size.

The benchmarks are run by hand, not by the suites, so nothing else notices when
a refactor breaks one (the keyword-only sweep of ``d0c5170`` broke
``bench/topology`` and it went unseen for three stops). Each is run here as
its own process, as a user runs it, at sizes that take seconds: this checks
that it reaches its verdict line and exits 0 or 1 by that verdict (1 = a
target missed), never with a traceback. It asserts nothing about the figures:
at these sizes, and on a loaded machine, they measure nothing.
``bench/policies`` is left out (minutes of simulation at its smallest);
``tests/unit/test_edl.py`` and the policy tests cover what it runs.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.conftest import REPO

pytestmark = pytest.mark.timeout(300)

# (module, arguments, a line its verdict prints whether or not targets are met)
BENCHMARKS = [
    ("bench.topology", ["--quick"], "planner round at"),
    ("bench.planner", ["--quick"], "busy"),
    (
        "bench.events",
        ["--messages", "200", "--rate", "50", "--duration", "2", "--workers", "1"],
        "targets (api path",
    ),
    ("bench.soak", ["--jobs", "20", "--reports-per-job", "5", "--active", "5"], "used_memory"),
    ("bench.apiserver", ["--small", "10", "--large", "50", "--samples", "3"], '"patch"'),
]


@pytest.mark.parametrize(
    ("module", "arguments", "verdict"), BENCHMARKS, ids=[name for name, _, _ in BENCHMARKS]
)
def test_the_benchmark_runs_to_its_verdict(module: str, arguments: list[str], verdict: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    shown = f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "Traceback" not in run.stderr, shown
    assert run.returncode in (0, 1), shown
    assert verdict in run.stdout, shown
