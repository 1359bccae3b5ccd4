"""Recorded report streams (``trainscaler_sim.trace.replay``): file round trip, replay, freshness.

The committed recording the replay-equivalence test plays must be what the
simulator records today (re-recorded from the Pollux data when it is there:
a change to the simulator or to goodput shows up here first), and replaying
it through the policy loop gives back its targets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.sim_fixtures import write_data, write_workload
from trainscaler_sim.trace.replay import Recording, record, replay, targets_by_job
from trainscaler_sim.trace.runner import default_data_dir

RECORDING = (
    Path(__file__).resolve().parents[1] / "data" / "replay-workload1-30jobs-40rounds.jsonl.gz"
)


def _data_dir() -> Path:
    configured = os.environ.get("TRAINSCALER_POLLUX_DATA_DIR")
    return Path(configured) if configured else default_data_dir()


def test_a_recording_round_trips_through_its_file_and_replays_to_its_targets(
    tmp_path: Path,
) -> None:
    data = write_data(tmp_path / "data")
    workload = write_workload(
        data,
        "workload-1.csv",
        [("a", 0, "toy", 2, 64), ("b", 30, "short", 1, 64), ("c", 200, "toy", 1, 32)],
    )
    recording = record(workload, data_dir=data, policy="goodput", rounds=30)
    assert recording.rounds, "nothing recorded"
    assert any(r.reports for r in recording.rounds)
    for name in ("plain.jsonl", "packed.jsonl.gz"):
        path = tmp_path / name
        recording.write(path)
        assert Recording.read(path) == recording
    replayed = replay(recording.rounds, policy="goodput", params=recording.header.params)
    assert replayed == [r.targets for r in recording.rounds]


def test_replaying_against_another_policy_gives_that_policys_targets() -> None:
    recording = Recording.read(RECORDING)
    static = targets_by_job(replay(recording.rounds, policy="static", params={}))
    goodput = targets_by_job([r.targets for r in recording.rounds])
    assert static.keys() == goodput.keys()
    assert static != goodput


def test_the_committed_recording_replays_to_its_targets() -> None:
    recording = Recording.read(RECORDING)
    assert len(recording.rounds) == 40
    replayed = replay(recording.rounds, policy="goodput", params=recording.header.params)
    assert replayed == [r.targets for r in recording.rounds]


def test_the_committed_recording_is_what_the_simulator_records_now() -> None:
    data = _data_dir()
    if not (data / "workloads" / "workload-1.csv").is_file():
        pytest.skip(f"no Pollux data at {data}")
    fresh = record(data / "workloads" / "workload-1.csv", data_dir=data, jobs=30, rounds=40)
    assert fresh.rounds == Recording.read(RECORDING).rounds, (
        "re-record: python -m trainscaler_sim.trace.replay record --workload 1 --jobs 30 --rounds 40 "
        f"--out {RECORDING}"
    )
