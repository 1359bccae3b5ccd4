"""goodput's resize rules, as tables of hand-computed cases.

The ReplicaSet scale-down prediction (``replicaset_shrink``), goodput.shape
for grows (where the added pods land decides whether a grow pays),
goodput.measure (no voluntary grow before the current size is measured),
goodput.soon (a start waits for GPUs that finishing jobs free instead of
preempting), goodput.protect (a start waits as long as the restart it would
cause costs) and curve points from clean spread epochs at unmeasured counts.
"""

from __future__ import annotations

import pytest

from scheduler_core.curves import CurvePoint
from scheduler_core.goodput_books import GoodputApp, GoodputJob, SpreadPoint
from scheduler_core.models import ElasticJob, EpochReport
from scheduler_core.node_packing import replicaset_shrink
from scheduler_core.policies.base import PolicyInput
from scheduler_core.policies.goodput import GoodputParams, GoodputState
from scheduler_core.registry import decide
from tests.unit.test_goodput import cluster, decision_of, job

PARAMS = GoodputParams(max_load_desired=1.0)
# t(4) = 1.0 s/unit, t(8) = 0.55 s/unit: efficiency at 8 = 4 / 4.4 = 0.91, efficient size 8.
FOUR_EIGHT = [
    CurvePoint(replicas=4, seconds_per_unit=1.0),
    CurvePoint(replicas=8, seconds_per_unit=0.55),
]
# t(n) = 4/n s/unit up to 4 (efficiency 1): efficient size 4 for a job of max 4.
LINEAR = [
    CurvePoint(replicas=1, seconds_per_unit=4.0),
    CurvePoint(replicas=2, seconds_per_unit=2.0),
    CurvePoint(replicas=4, seconds_per_unit=1.0),
]


@pytest.mark.parametrize(
    ("placement", "remove", "left"),
    [
        # Pods ranked by how many of the job's pods share their node: both on a go.
        ({"a": 2, "b": 1, "c": 1}, 2, {"b": 1, "c": 1}),
        # Equal ranks: the last node by name first (upstream: ready time, then random).
        ({"a": 2, "b": 2}, 2, {"a": 2}),
        ({"a": 4, "b": 1}, 1, {"a": 3, "b": 1}),
        ({"a": 1}, 0, {"a": 1}),
    ],
)
def test_replicaset_shrink_prediction(
    placement: dict[str, int], remove: int, left: dict[str, int]
) -> None:
    assert replicaset_shrink(placement, remove) == left


def _running(name: str, placement: dict[str, int], **kwargs: object) -> ElasticJob:
    current = sum(placement.values())
    return job(name, current=current, **kwargs).model_copy(update={"placement": placement})  # type: ignore[arg-type]


def _grow_state(
    *, size: int, measured: bool = True, spread: list[SpreadPoint] | None = None
) -> GoodputState:
    book = GoodputJob(
        application="app",
        total_epochs=10,
        epochs_done=5,
        last_epoch_units=100.0,
        size=size,
        measured=measured,
    )
    app = GoodputApp(
        points=FOUR_EIGHT, total_units=1000.0, total_measured=True, spread=spread or []
    )
    return GoodputState(jobs={"default/a": book}, apps={"app": app}, last_now=0.0)


@pytest.mark.parametrize(
    ("free", "measured", "size", "target", "rule"),
    [
        # 1000 units left: 1000 s at 4; 4 more land on node-01 (4 free): 8 on 2 nodes,
        # packed, 550 s: saves 450 s > max(2 x 30, 0.15 x 1000): grows.
        ([0, 4, 0, 0], True, 4, 8, "goodput.grow"),
        # Free 1+1+2 on three nodes: the 4 pods land on all three (MostAllocated), 8 on
        # 4 nodes; measured 2x for that shape: 1100 s > 1000 s: keeps 4.
        ([0, 1, 1, 2], True, 4, 4, "goodput.keep"),
        # Rule goodput.measure: the same packed grow waits for a clean epoch at 4.
        ([0, 4, 0, 0], False, 4, 4, "goodput.measure"),
        # ... unless the job runs far below its efficient size: 2 < 0.5 x 8. Its 6 more
        # pods land 2 on its own node-00 (fullest with room), 4 on node-01: 8 on 2
        # nodes, packed: 550 s against 2000 s at 2.
        ([2, 4, 0, 0], False, 2, 8, "goodput.grow"),
    ],
)
def test_grow_rules(free: list[int], measured: bool, size: int, target: int, rule: str) -> None:
    spread = [SpreadPoint(replicas=8, nodes=4, factor=2.0)]
    held = 16 - sum(free) - size
    request = PolicyInput(
        jobs=(
            _running("a", {"node-00": size}, max_replicas=8),
            job("p", current=held, paused=True, application=None),
        ),
        cluster=cluster(free),
        now=60.0,
    )
    state = _grow_state(size=size, measured=measured, spread=spread)
    decision = decision_of(decide("goodput", request, state=state, params=PARAMS).plan, "default/a")
    assert (decision.target, decision.reason.rule) == (target, rule)


def _soon_state(*, short_done_units: float, b_waited_s: float = 0.0) -> GoodputState:
    def book(app: str, units_done: float, waited_s: float = 0.0) -> GoodputJob:
        return GoodputJob(
            application=app,
            total_epochs=10,
            epochs_done=5,
            units_done=units_done,
            measured=True,
            waited_s=waited_s,
            arrival=60.0,  # arrived this round: waited_s is all it waited
        )

    def app(total: float) -> GoodputApp:
        return GoodputApp(points=LINEAR, total_units=total, total_measured=True)

    return GoodputState(
        jobs={
            "default/f": book("f", short_done_units),
            "default/b": book("b", 0.0, b_waited_s),
            "default/g": book("g", 0.0),
        },
        apps={"f": app(1000.0), "b": app(1000.0), "g": app(100_000.0)},
        last_now=0.0,
    )


@pytest.mark.parametrize(
    ("short_done_units", "b_waited_s", "b_target", "b_rule", "g_target"),
    [
        # Horizon = one round (60 s) + 2 restarts x hold_factor 2 x 30 s = 180 s.
        # f has 10 units left (10 s at 4): its 4 GPUs come free: b waits, g keeps.
        (990.0, 0.0, 0, "goodput.soon", 4),
        # f has 1000 s left: b (1000 units x 4 GPUs) outranks g (100000 x 4 / 2),
        # but taking g's 4 GPUs restarts g: 30 s of its own plus its 4 GPUs idle
        # for 30 s, a 4/8 share of the delay of the 1 waiting job: 45 s.
        # Rule goodput.protect: b waits that long first ...
        (0.0, 0.0, 0, "goodput.protect", 4),
        (0.0, 44.0, 0, "goodput.protect", 4),
        # ... then starts in g's GPUs.
        (0.0, 45.0, 4, "goodput.start", 0),
    ],
)
def test_a_start_waits_for_gpus_finishing_jobs_free(
    short_done_units: float, b_waited_s: float, b_target: int, b_rule: str, g_target: int
) -> None:
    request = PolicyInput(
        jobs=(
            _running("f", {"node-00": 4}, max_replicas=4, application="f"),
            job("b", max_replicas=4, application="b"),
            _running("g", {"node-01": 4}, max_replicas=4, application="g"),
        ),
        cluster=cluster([0, 0]),
        now=60.0,
    )
    state = _soon_state(short_done_units=short_done_units, b_waited_s=b_waited_s)
    plan = decide("goodput", request, state=state, params=PARAMS).plan
    b = decision_of(plan, "default/b")
    assert (b.target, b.reason.rule) == (b_target, b_rule)
    assert decision_of(plan, "default/f").target == 4
    assert decision_of(plan, "default/g").target == g_target


@pytest.mark.parametrize(
    ("replicas", "nodes", "counts", "spread"),
    [
        # 8 replicas on 3 nodes (packed needs 2), never measured packed: the epoch
        # is the best bound on t(8), a curve point; nothing to compare a slowdown to.
        (8, 3, [4, 8], []),
        # 4 on 2 nodes, 4 measured packed (1.0 s/unit): a 1.5x slowdown, no point.
        (4, 2, [4], [SpreadPoint(replicas=4, nodes=2, factor=1.5)]),
    ],
)
def test_clean_spread_epochs_teach_the_curve_or_the_slowdown(
    replicas: int, nodes: int, counts: list[int], spread: list[SpreadPoint]
) -> None:
    book = GoodputJob(application="app", total_epochs=10, epochs_done=5)
    app = GoodputApp(points=[CurvePoint(replicas=4, seconds_per_unit=1.0)])
    state = GoodputState(jobs={"default/a": book}, apps={"app": app}, last_now=0.0)
    report = EpochReport(
        job="default/a",
        replicas=replicas,
        epoch_time_s=150.0,
        epoch=6,
        total_epochs=10,
        iterations=100,
        nodes=nodes,
        at=50.0,
    )
    request = PolicyInput(
        jobs=(job("a", current=replicas, max_replicas=8),),
        cluster=cluster([0, 0, 0, 4]),
        reports=(report,),
        now=60.0,
    )
    new = decide("goodput", request, state=state, params=PARAMS).state
    assert [p.replicas for p in new.apps["app"].points] == counts
    assert new.apps["app"].spread == spread


def test_a_grow_sees_the_pods_an_earlier_grow_of_the_round_landed() -> None:
    # a (ranked first: 500 units left, no spread measured) and b (900 left, 8 on 4
    # nodes measured 2x slower) run 4 each on their own node; free: node-01 4,
    # node-03 1, node-04 1, node-05 2. MostAllocated lands a's 4 more on the fullest
    # nodes, node-03/04/05: 275 s x the spread prior < 500 s, a grows. Those GPUs are
    # then taken, so b's 4 more land on node-01: 8 on 2 nodes, packed, 495 s against
    # 900 s: b grows. Predicted on the round's starting room, b's pods would land on
    # node-03/04/05 too: 8 on 4 nodes, 990 s > 900 s, and b would keep 4.
    apps = {
        "flat": GoodputApp(points=FOUR_EIGHT, total_units=1000.0, total_measured=True),
        "app": GoodputApp(
            points=FOUR_EIGHT,
            total_units=1000.0,
            total_measured=True,
            spread=[SpreadPoint(replicas=8, nodes=4, factor=2.0)],
        ),
    }

    def book(application: str, units_done: float) -> GoodputJob:
        return GoodputJob(
            application=application,
            total_epochs=10,
            units_done=units_done,
            size=4,
            measured=True,
        )

    state = GoodputState(
        jobs={"default/a": book("flat", 500.0), "default/b": book("app", 100.0)},
        apps=apps,
        last_now=0.0,
    )
    request = PolicyInput(
        jobs=(
            _running("a", {"node-00": 4}, max_replicas=8),
            _running("b", {"node-02": 4}, max_replicas=8),
            job("p", current=8, paused=True, application=None),
        ),
        cluster=cluster([0, 4, 0, 1, 1, 2]),
        now=60.0,
    )
    plan = decide("goodput", request, state=state, params=PARAMS).plan
    assert decision_of(plan, "default/a").target == 8
    assert decision_of(plan, "default/b").target == 8
