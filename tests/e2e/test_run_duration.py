"""``trainscaler run --duration 90`` on the loopback cluster, from start to a clean exit.

Every simulated job (ElasticJobs on Deployments and train requests through
the API) must be scaled at least once, by the runtime (its applied target in
Redis) as seen by the job itself; nothing may be dead-lettered; the command
exits 0 by itself, and afterwards no process it started is alive and none of
its ports is still listening.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import DATA_DIR
from trainscaler_sim.embedded.ports import port_in_use

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]

DURATION_S = 90


def test_run_scales_every_job_and_stops_cleanly(embedded_run) -> None:
    run = embedded_run(duration=DURATION_S)
    run.wait_line(r"^Flower: http://127\.0\.0\.1:\d+$", timeout=90)
    run.wait_line(r"^API: +http://127\.0\.0\.1:\d+", timeout=10)
    ready = run.wait_line(r"^ready in (\d+\.\d+)s", timeout=30)
    assert float(ready.group(1)) < 60, run.output()

    code = run.wait_exit(timeout=DURATION_S + 60)

    output = run.output()
    assert code == 0, output[-4000:]
    assert "stopping: duration 90s reached" in output
    summary = run.summary()
    assert summary["dead_letters"] == 0, summary
    assert summary["autoscale_runs"] >= 3, summary
    kinds = {job["kind"] for job in summary["jobs"].values()}
    assert kinds == {"elasticjob", "train"}, summary["jobs"]
    # The default data folder is ../shared/data/pollux beside the repository.
    want_curves = "trace:" if (DATA_DIR / "traces").is_dir() else "synthetic"
    for name, job in summary["jobs"].items():
        assert job["curve"].startswith(want_curves), (name, job)
        assert job["error"] == "", (name, job)
        assert job["scale_events"] >= 1, (name, job)
        assert job["applied"] is not None, (name, job)
        assert job["epochs"] >= 1, (name, job)
    assert set(summary["children"]) == {"redis", "apiserver", "worker", "beat", "api", "flower"}
    assert run.leftovers_after() == [], f"processes left behind: {run.leftovers()}"
    busy = {name: port for name, port in summary["ports"].items() if port_in_use(port)}
    assert busy == {}, f"ports still listening after exit: {busy}"
