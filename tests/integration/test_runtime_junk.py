"""1000 hypothesis-generated junk payloads: all dead-lettered, workers still healthy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from scheduler_core.models import EpochReport, TrainRequest
from tests.integration.conftest import wait_for

TASKS = ("trainscaler.submit", "trainscaler.report_epoch")
MODELS: dict[str, type[BaseModel]] = {
    "trainscaler.submit": TrainRequest,
    "trainscaler.report_epoch": EpochReport,
}

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
# Near misses too: the right keys with wrong or missing values.
near_report = st.fixed_dictionaries(
    {"job": st.one_of(text, st.integers()), "replicas": st.one_of(st.integers(max_value=-1), text)}
)
near_request = st.fixed_dictionaries(
    {"model_type": text, "batch_size": st.integers(max_value=0), "epochs": scalars, "dataset": text}
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)
junk = st.one_of(json_values, near_report, near_request)


def _valid(task: str, payload: Any) -> bool:
    try:
        MODELS[task].model_validate(payload)
    except ValidationError:
        return False
    return True


@pytest.mark.timeout(180)
def test_1000_junk_payloads_are_dead_lettered(procs, client_app, dead_letters, recorder) -> None:
    workers = [procs.worker("w1"), procs.worker("w2")]
    sent: list[tuple[str, Any, Any]] = []

    @given(task=st.sampled_from(TASKS), payload=junk)
    @settings(
        max_examples=1000,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def send_junk(task: str, payload: Any) -> None:
        if _valid(task, payload) or len(sent) >= 1000:
            return
        sent.append((task, payload, client_app.send_task(task, args=[payload])))

    for _ in range(5):
        if len(sent) >= 1000:
            break
        send_junk()
    assert len(sent) == 1000
    for task, payload, result in sent:
        outcome = result.get(timeout=60)
        assert outcome["ok"] is False and outcome["dead_lettered"] is True, (task, payload)
        assert outcome["error"]
    assert dead_letters.count() == 1000
    letters = dead_letters.list(limit=1000)
    assert {d.task for d in letters} == set(TASKS)
    assert all(d.error and d.at > 0 for d in letters)
    # Still healthy: alive, and a real report goes all the way through.
    assert all(w.alive() for w in workers)
    report = EpochReport(job="default/after-junk", replicas=2, epoch=0)
    assert client_app.send_task(
        "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
    ).get(timeout=20)["ok"]
    wait_for(
        lambda: recorder.all_replicas().get("default/after-junk") == 2, timeout=20, what="scaled"
    )
