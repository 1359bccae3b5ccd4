"""Rule goodput.spare (a running job probes only into GPUs nobody holds), as a
table of hand-computed cases.

Job ``a`` runs at 8 (node-00 and node-01 full) with curve t(4) = 1.0,
t(8) = 0.5 s/unit: efficiency 1 at 8, still scaling, so its probe is due at
4 x 8 = 32, clamped to its max of 16, predicted t(16) = 0.5 / 2 = 0.25.
With 1000 units left: R(8) = 500 s, R(16) = 250 s. goodput.queue at w = 1/16
(two jobs, 16 GPUs): 0.5 x 1.5 = 0.75 at 8 against 0.25 x 2 = 0.5 at 16: it
wants 16. Job ``g`` (100000 units left at t(4) = 1.0: rank 400000 GPU-s
against a's 4000) runs on the other nodes and is the one a probe would shrink.
"""

from __future__ import annotations

import pytest

from scheduler_core.curves import CurvePoint
from scheduler_core.goodput_books import GoodputApp, GoodputJob
from scheduler_core.models import ElasticJob
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.goodput import GoodputParams, GoodputState
from scheduler_core.registry import decide
from tests.unit.test_goodput import cluster, decision_of, job

PARAMS = GoodputParams(max_load_desired=1.0)


def _running(name: str, placement: dict[str, int], *, application: str) -> ElasticJob:
    current = sum(placement.values())
    return job(name, current=current, application=application).model_copy(
        update={"placement": placement}
    )


def _state() -> GoodputState:
    def book(app: str) -> GoodputJob:
        return GoodputJob(application=app, total_epochs=10, epochs_done=5, measured=True)

    scaling = [
        CurvePoint(replicas=4, seconds_per_unit=1.0),
        CurvePoint(replicas=8, seconds_per_unit=0.5),
    ]
    flat = [CurvePoint(replicas=4, seconds_per_unit=1.0)]
    return GoodputState(
        jobs={"default/a": book("a"), "default/g": book("g")},
        apps={
            "a": GoodputApp(points=scaling, total_units=1000.0, total_measured=True),
            "g": GoodputApp(points=flat, total_units=100_000.0, total_measured=True),
        },
        last_now=0.0,
    )


@pytest.mark.parametrize(
    ("g_placement", "a_target", "a_rule", "message"),
    [
        # node-03's 4 GPUs are free: the probe is cut to 8 + 4 = 12, predicted
        # t(12) = 0.5 / 1.5 (goodput.probe), 333 s: saves 167 s > max(2 x 30 s,
        # 0.15 x 500 s): a grow, packed on node-03. Without the rule a takes 16 and g
        # is preempted.
        (
            {"node-02": 4},
            12,
            "goodput.grow",
            "goodput.spare: its probe to 16 cut to the GPUs nobody holds",
        ),
        # g holds node-02 and node-03: nothing is spare, a keeps 8 (its largest
        # measured count) rather than take g's GPUs for a gain not yet confirmed.
        (
            {"node-02": 4, "node-03": 4},
            8,
            "goodput.spare",
            "keeps 8; its probe to 16 would take GPUs from running jobs",
        ),
    ],
)
def test_a_running_probe_takes_only_spare_gpus(
    g_placement: dict[str, int], a_target: int, a_rule: str, message: str
) -> None:
    jobs = (
        _running("a", {"node-00": 4, "node-01": 4}, application="a"),
        _running("g", g_placement, application="g"),
    )
    free = [0, 0, 0, 4 - g_placement.get("node-03", 0)]
    request = PolicyInput(jobs=jobs, cluster=cluster(free), now=60.0)
    plan = decide("goodput", request, state=_state(), params=PARAMS).plan
    a, g = decision_of(plan, "default/a"), decision_of(plan, "default/g")
    assert (a.target, a.reason.rule) == (a_target, a_rule)
    assert message in a.reason.message
    assert a.reason.numbers["spare_refused"] == 16
    assert (g.target, g.reason.rule) == (sum(g_placement.values()), "goodput.keep")


def test_a_start_probe_is_not_capped() -> None:
    # The same a, waiting, with g running on node-02: its start is priced by
    # goodput.protect, not capped by goodput.spare. Having waited past the
    # protect price it starts at the probe, 16, preempting g.
    book = GoodputJob(
        application="a", total_epochs=10, epochs_done=5, measured=True, waited_s=3600.0
    )
    state = _state()
    state = state.model_copy(update={"jobs": {**state.jobs, "default/a": book}})
    jobs = (job("a", application="a"), _running("g", {"node-02": 4}, application="g"))
    request = PolicyInput(jobs=jobs, cluster=cluster([4, 4, 0, 4]), now=60.0)
    plan = decide("goodput", request, state=state, params=PARAMS).plan
    a, g = decision_of(plan, "default/a"), decision_of(plan, "default/g")
    assert (a.target, a.reason.rule) == (16, "goodput.start")
    assert "spare_refused" not in a.reason.numbers
    assert (g.target, g.reason.rule) == (0, "goodput.preempt")
