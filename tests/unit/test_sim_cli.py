"""``trainscaler simulate`` end to end on a tiny hand-made data folder."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.unit.sim_fixtures import write_data, write_workload
from trainscaler_sim.trace.plots import gpus_by_application
from trainscaler_sim.trace.results import JobResult, SimResult
from workers.commands.simulate import register


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A group, so the sub-command is named as on the real CLI."""

    register(app)
    return app


def test_simulate_prints_the_table_and_writes_csv_and_plots(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    workload = write_workload(
        data, "workload-1.csv", [("a", 0, "toy", 1, 64), ("b", 30, "short", 1, 64)]
    )
    app = make_app()
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--workload",
            str(workload),
            "--policy",
            "static,goodput",
            "--data-dir",
            str(data),
            "--out",
            str(out),
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "avg JCT" in result.output and "goodput" in result.output
    with (out / "jobs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["policy"], r["name"]) for r in rows} == {
        ("static", "a"),
        ("static", "b"),
        ("goodput", "a"),
        ("goodput", "b"),
    }
    static_a = next(r for r in rows if r["policy"] == "static" and r["name"] == "a")
    assert float(static_a["jct_s"]) == 230.0
    for name in ("summary.csv", "jct.png", "gpus-goodput-workload-1.png"):
        assert (out / name).stat().st_size > 0


def test_unknown_policy_is_a_clear_error(tmp_path: Path) -> None:
    data = write_data(tmp_path / "data")
    workload = write_workload(data, "workload-1.csv", [("a", 0, "toy", 1, 64)])
    app = make_app()
    result = CliRunner().invoke(
        app, ["simulate", "--workload", str(workload), "--policy", "nope", "--data-dir", str(data)]
    )
    assert result.exit_code != 0


def test_without_out_the_results_go_outside_the_source_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_data(tmp_path / "data")
    workload = write_workload(data, "workload-1.csv", [("a", 0, "toy", 1, 64)])
    monkeypatch.chdir(tmp_path)  # where a repository checkout would be
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the temporary directory
    result = CliRunner().invoke(
        make_app(),
        ["simulate", "--workload", str(workload), "--policy", "static",
         "--data-dir", str(data), "--nodes", "1", "--gpus-per-node", "2", "--no-plots"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "sim-results").exists()
    (written,) = (tmp_path / "tmp").glob("trainscaler-sim-*")
    assert (written / "jobs.csv").exists()


def test_the_gpu_plot_groups_jobs_by_application() -> None:
    jobs = [
        JobResult("a1", "cifar10", 64, 1, 0.0, 0.0, 100.0, 0, 0.0, 2),
        JobResult("a2", "cifar10", 64, 1, 0.0, 0.0, 100.0, 0, 0.0, 1),
        JobResult("b1", "bert", 64, 1, 0.0, 0.0, 100.0, 0, 0.0, 3),
    ]
    result = SimResult(
        "static", "1", jobs, gpu_total=8, makespan_s=120.0, gpu_seconds_allocated=0.0,
        timeline=[(0.0, "a1", 2), (0.0, "a2", 1), (60.0, "b1", 3), (60.0, "a2", 0)],
    )  # fmt: skip
    times, series = gpus_by_application(result, step_s=60.0)
    assert times == [0.0, 60.0]
    assert series == {"bert": [0, 3], "cifar10": [3, 2]}
