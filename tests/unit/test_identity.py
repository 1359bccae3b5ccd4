"""Job identities in the core: what the models accept as namespaces, names and keys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scheduler_core.identity import check_job_ref, is_name, is_namespace, split_job_key
from scheduler_core.models import ElasticJob, EpochReport, TrainRequest, TrainTask

HOSTILE_KEYS = [
    "kube-system",  # no name
    "../../etc/passwd",
    "default/../kube-system/x",
    "default/\x00",
    "default/a\nb\r\n",
    "default/a\n",
    "/etc/passwd",
    "default/",
    "a/b/c",
    "Default/x",
    "default/a b",
    "default/-x",
    "default/x.",
    "default/x..y",
    "-ns/x",
    "n" * 64 + "/x",
    "default/" + "x" * 254,
    "default/" + "x" * 1_000_000,
]
VALID_KEYS = ["default/x", "ml/resnet-50.v2", "a/b", "n" * 63 + "/" + ".".join(["x" * 63] * 3)]


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=lambda k: repr(k[:24]))
def test_hostile_keys_are_refused_everywhere_a_key_is_built(key: str) -> None:
    with pytest.raises(ValueError):
        split_job_key(key)
    with pytest.raises(ValidationError) as refused:
        EpochReport(job=key, replicas=1)
    assert [e["loc"] for e in refused.value.errors()] == [("job",)]


@pytest.mark.parametrize("key", VALID_KEYS)
def test_kubernetes_keys_are_accepted(key: str) -> None:
    namespace, name = split_job_key(key)
    assert f"{namespace}/{name}" == key
    assert EpochReport(job=key, replicas=1).job == key


def test_names_and_namespaces() -> None:
    assert is_namespace("team-a") and not is_namespace("team.a") and not is_namespace("")
    assert is_name("a.b-c") and not is_name("a_b") and not is_name("A")
    assert not is_namespace("a\n") and not is_name("a\n")  # no trailing newline sneaks past $
    check_job_ref("3f2a9c1d0b7e")
    check_job_ref("ml/3f2a9c1d0b7e")
    with pytest.raises(ValueError):
        check_job_ref("../x")


@pytest.mark.parametrize(
    ("model", "fields", "loc"),
    [
        (TrainRequest, {"namespace": "kube-system/x"}, ("namespace",)),
        (TrainRequest, {"model_type": "m" * 254}, ("model_type",)),
        (TrainRequest, {"dataset": "d" * 254}, ("dataset",)),
        (TrainRequest, {"ps_url": "http://x/" + "p" * 2048}, ("ps_url",)),
    ],
)
def test_train_request_fields_are_bounded_and_named(
    model: type[TrainRequest], fields: dict[str, str], loc: tuple[str, ...]
) -> None:
    base = {"model_type": "m", "batch_size": 1, "epochs": 1, "dataset": "d"}
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**base, **fields})
    assert [e["loc"] for e in refused.value.errors()] == [loc]


def test_train_task_and_elastic_job_identities() -> None:
    request = TrainRequest(model_type="m", batch_size=1, epochs=1, dataset="d")
    assert TrainTask(job_id="ml/j1", parameters=request).job_id == "ml/j1"
    with pytest.raises(ValidationError):
        TrainTask(job_id="../j1", parameters=request)
    with pytest.raises(ValidationError):
        ElasticJob(namespace="kube_system", name="x")
    with pytest.raises(ValidationError):
        ElasticJob(name="x/y")
