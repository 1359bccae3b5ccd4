"""``trainscaler simulate`` end to end on a tiny hand-made data folder."""

from __future__ import annotations

import csv
from pathlib import Path

import typer
from typer.testing import CliRunner

from tests.unit.sim_fixtures import write_data, write_workload
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
