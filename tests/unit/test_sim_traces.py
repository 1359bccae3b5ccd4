"""Trace loading and interpolation: exact where measured, sensible between."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.sim_fixtures import write_data
from trainscaler_sim.trace.traces import ApplicationTrace, load_traces, placement_key


@pytest.fixture
def toy(tmp_path: Path) -> ApplicationTrace:
    return load_traces(write_data(tmp_path))["toy"]


def test_measured_placement_is_exact(toy: ApplicationTrace) -> None:
    assert toy.iteration_time([1], 64) == 1.0
    assert toy.iteration_time([2], 64) == 0.6
    assert toy.iteration_time([1, 1], 64) == 0.7


def test_interpolates_between_measured_local_batches(toy: ApplicationTrace) -> None:
    # local batch 48 lies halfway between the measured 32 (0.5 s) and 64 (1.0 s).
    assert toy.iteration_time([1], 48) == pytest.approx(0.75)


def test_large_local_batch_accumulates_gradients(toy: ApplicationTrace) -> None:
    # Batch 128 on one replica: two steps of 64 (the largest measured), one sync.
    assert toy.iteration_time([1], 128) == pytest.approx(2 * 1.0 - 0.0)


def test_placement_key_ignores_order_and_empty_nodes() -> None:
    assert placement_key([2, 0, 1]) == "12"


def test_epoch_ends_and_interpolated_batch(toy: ApplicationTrace) -> None:
    assert toy.epoch_ends(64) == (100, 200)
    # Between batch 32 and 64, log-log: batch 45.25 (geometric middle) -> ~141 and ~283.
    ends = toy.epoch_ends(45)
    assert 100 < ends[0] < 200 and 200 < ends[1] < 400


def test_max_replicas_from_smallest_measured_local_batch(toy: ApplicationTrace) -> None:
    assert toy.min_local_bsz == 16
    assert toy.max_replicas(64) == 4
    assert toy.max_replicas(4096, cap=64) == 64


def test_real_traces_load_when_present() -> None:
    data = Path(__file__).resolve().parents[3] / "shared" / "data" / "pollux"
    if not (data / "traces").is_dir():
        pytest.skip("the Pollux traces are not beside the repository")
    traces = load_traces(data, {"cifar10"})
    cifar = traces["cifar10"]
    # Exactly the measured row: placement 4, local batch 1024 (batch 4096 on 4 GPUs).
    assert cifar.iteration_time([4], 4096) == pytest.approx(0.7898811340332031)
    assert cifar.epoch_ends(4096)[-1] == 2011
