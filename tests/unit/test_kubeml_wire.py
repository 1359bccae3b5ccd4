"""KubeML's structs decoded as Go's encoding/json does, and written under KubeML's names.

The expected values are Go's documented ``json.Unmarshal`` behaviour
(https://pkg.go.dev/encoding/json#Unmarshal): case-insensitive key match with
the exact name preferred, unknown keys ignored, ``null`` a no-op on non-pointer
fields, a later duplicate key winning, invalid UTF-8 and lone surrogates
replaced by U+FFFD, and type errors for anything the field's Go type cannot hold.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler_core.models import TrainOptions, TrainRequest
from workers.adapters.kubeml_wire import (
    INFER_REQUEST,
    JOB_STATE,
    TRAIN_REQUEST,
    TRAIN_TASK,
    GoDecodeError,
    decode,
    job_state_json,
    train_task_json,
)

ZERO_OPTIONS = {
    "default_parallelism": 0,
    "static_parallelism": False,
    "validate_every": 0,
    "k": 0,
    "goal_accuracy": 0.0,
}
ZERO_REQUEST = {
    "model_type": "",
    "batch_size": 0,
    "epochs": 0,
    "dataset": "",
    "lr": 0.0,
    "function_name": "",
    "options": ZERO_OPTIONS,
}


@pytest.mark.parametrize("body", [b"null", b"{}", b' {"unknown": [1, {"a": null}]} '])
def test_missing_fields_are_go_zero_values(body: bytes) -> None:
    assert decode(body, TRAIN_REQUEST) == ZERO_REQUEST


def test_keys_match_case_insensitively_and_the_exact_name_wins() -> None:
    decoded = decode(b'{"MODEL_TYPE": "a", "Batch_Size": 4, "model_type": "b"}', TRAIN_REQUEST)
    assert (decoded["model_type"], decoded["batch_size"]) == ("b", 4)
    # Case folding as Go's: the Kelvin sign folds to k.
    assert decode('{"options": {"\u212a": 3}}'.encode(), TRAIN_REQUEST)["options"]["k"] == 3


def test_later_duplicates_win_null_changes_nothing_and_structs_merge() -> None:
    body = b'{"epochs": 1, "epochs": 2, "dataset": "x", "dataset": null}'
    decoded = decode(body, TRAIN_REQUEST)
    assert (decoded["epochs"], decoded["dataset"]) == (2, "x")
    task = decode(
        b'{"job": {"id": "j", "state": {"parallelism": 2}}, "job": {"state": {"elapsed_time": 3}}}',
        TRAIN_TASK,
    )
    assert task["job"]["id"] == "j"
    assert task["job"]["state"] == {"parallelism": 2, "elapsed_time": 3.0}


def test_strings_replace_invalid_utf8_and_lone_surrogates() -> None:
    decoded = decode(b'{"model_type": "a\xffb", "dataset": "\\ud800x"}', TRAIN_REQUEST)
    assert (decoded["model_type"], decoded["dataset"]) == ("a\ufffdb", "\ufffdx")
    pair = decode(b'{"dataset": "\\ud83d\\ude00"}', TRAIN_REQUEST)
    assert pair["dataset"] == "\U0001f600"


@pytest.mark.parametrize(
    ("body", "go_type"),
    [
        (b"", TRAIN_REQUEST),
        (b"   ", TRAIN_REQUEST),
        (b"{", TRAIN_REQUEST),
        (b"{} {}", TRAIN_REQUEST),
        (b"\xef\xbb\xbf{}", TRAIN_REQUEST),  # a BOM is not JSON to Go
        (b"[]", TRAIN_REQUEST),
        (b"3", TRAIN_REQUEST),
        (b'{"batch_size": "1"}', TRAIN_REQUEST),
        (b'{"batch_size": 1.0}', TRAIN_REQUEST),
        (b'{"batch_size": 1e2}', TRAIN_REQUEST),
        (b'{"batch_size": true}', TRAIN_REQUEST),
        (b'{"batch_size": 9223372036854775808}', TRAIN_REQUEST),
        (b'{"batch_size": ' + b"9" * 5000 + b"}", TRAIN_REQUEST),
        (b'{"lr": 3.5e38}', TRAIN_REQUEST),
        (b'{"lr": "0.1"}', TRAIN_REQUEST),
        (b'{"lr": NaN}', TRAIN_REQUEST),
        (b'{"lr": Infinity}', TRAIN_REQUEST),
        (b'{"model_type": 5}', TRAIN_REQUEST),
        (b'{"options": []}', TRAIN_REQUEST),
        (b'{"options": {"static_parallelism": 1}}', TRAIN_REQUEST),
        (b'{"elapsed_time": 1e309}', JOB_STATE),
        (b'{"job": {"pod": 5}}', TRAIN_TASK),
        (b'{"data": {}}', INFER_REQUEST),
        (b'{"data": "x"}', INFER_REQUEST),
    ],
)
def test_what_go_cannot_decode_is_an_error(body: bytes, go_type: Any) -> None:
    with pytest.raises(GoDecodeError):
        decode(body, go_type)


def test_unknown_keys_are_skipped_unconverted() -> None:
    # Go skips an unknown key's value: a number no Go type could hold is no error there.
    body = b'{"unknown": ' + b"9" * 5000 + b', "batch_size": 2, "x": 1e999}'
    assert decode(body, TRAIN_REQUEST)["batch_size"] == 2
    with pytest.raises(GoDecodeError):
        decode(b'{"model_id": "m", "data": [1e999]}', INFER_REQUEST)  # interface{}: float64


def test_numbers_go_accepts() -> None:
    state = decode(b'{"parallelism": -9223372036854775808, "elapsed_time": 5}', JOB_STATE)
    assert state == {"parallelism": -(2**63), "elapsed_time": 5.0}
    assert decode(b'{"lr": 3.4e38}', TRAIN_REQUEST)["lr"] == pytest.approx(3.4e38)


def test_interface_values_take_any_json() -> None:
    decoded = decode(
        b'{"model_id": "m", "data": [[1, 2.5], {"a": null}, "s", true]}', INFER_REQUEST
    )
    assert decoded == {"model_id": "m", "data": [[1.0, 2.5], {"a": None}, "s", True]}
    assert decode(b'{"data": null}', INFER_REQUEST)["data"] is None


def test_the_parameter_server_gets_kubeml_names_only() -> None:
    request = TrainRequest(
        model_type="resnet34",
        batch_size=128,
        epochs=3,
        dataset="cifar10",
        learning_rate=0.05,
        function_name="resnet",
        options=TrainOptions(default_parallelism=2, validate_every=1, k=8, goal_accuracy=90),
        namespace="kubeml",
        max_replicas=4,
        ps_url="http://ps",
    )
    task = train_task_json(request, job_id="abc", parallelism=2, elapsed_time=None)
    assert task == {
        "request": {
            "model_type": "resnet34",
            "batch_size": 128,
            "epochs": 3,
            "dataset": "cifar10",
            "lr": 0.05,
            "function_name": "resnet",
            "options": {
                "default_parallelism": 2,
                "static_parallelism": False,
                "validate_every": 1,
                "k": 8,
                "goal_accuracy": 90.0,
            },
        },
        "job": {"id": "abc", "state": {"parallelism": 2, "elapsed_time": 0.0}},
    }
    assert job_state_json(parallelism=3, elapsed_time=12.5) == {
        "parallelism": 3,
        "elapsed_time": 12.5,
    }
    # What trainscaler writes, KubeML's decoding reads back unchanged.
    assert decode(json.dumps(task).encode(), TRAIN_TASK)["request"] == task["request"]
