"""The Kubernetes adapter's pure parts: selectors, status, rate limit, errors, paths."""

from __future__ import annotations

import pytest

from scheduler_core.ports import PermanentScaleError, TransientScaleError
from workers.adapters.kubernetes.cache import Backoff
from workers.adapters.kubernetes.client import KubeApiError, KubeConnectionError, TokenBucket
from workers.adapters.kubernetes.kinds import (
    DEPLOYMENTS,
    ELASTICJOBS,
    NODES,
    PODS,
    KindResolver,
)
from workers.adapters.kubernetes.scaler import map_error, split_job_key
from workers.adapters.kubernetes.selectors import (
    SelectorError,
    from_label_selector,
    parse_selector,
)
from workers.adapters.kubernetes.status import (
    Decision,
    next_status,
    replica_limit,
    rfc3339,
    scaling_conditions,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t


# --- selectors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("app=a", {"app": "a"}, True),
        ("app==a", {"app": "b"}, False),
        ("app!=a", {}, True),
        ("app!=a", {"app": "a"}, False),
        ("tier in (x, y)", {"tier": "y"}, True),
        ("tier in (x,y)", {}, False),
        ("tier notin (x,y)", {}, True),
        ("tier notin (x,y)", {"tier": "x"}, False),
        ("gpu", {"gpu": ""}, True),
        ("!gpu", {"gpu": "1"}, False),
        ("app=a,tier in (x,y),!canary", {"app": "a", "tier": "x"}, True),
        ("app=a,tier in (x,y),!canary", {"app": "a", "tier": "x", "canary": "1"}, False),
    ],
)
def test_string_selectors(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


def test_bad_string_selector_raises() -> None:
    with pytest.raises(SelectorError):
        parse_selector("a in (x")
    with pytest.raises(SelectorError):
        parse_selector("!a in (x)")


def test_structured_selector_and_null_selector() -> None:
    selector = from_label_selector(
        {
            "matchLabels": {"app": "a"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["x"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.matches({"app": "a", "tier": "x"})
    assert not selector.matches({"app": "a", "tier": "x", "canary": "y"})
    assert from_label_selector({}).matches({"any": "thing"})
    assert not from_label_selector(None).matches({})
    with pytest.raises(SelectorError):
        from_label_selector({"matchExpressions": [{"key": "a", "operator": "Near"}]})


# --- status ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "limited_by", "reason"),
    [
        (9, None, "TooManyReplicas"),
        (6, "at_max", "TooManyReplicas"),
        (1, None, "TooFewReplicas"),
        (4, "no_node_fits", "InsufficientCapacity"),
        (4, "cpu_cap", "InsufficientCapacity"),
        (4, None, None),
    ],
)
def test_scaling_limited_reasons(
    requested: int, limited_by: str | None, reason: str | None
) -> None:
    limit = replica_limit(
        requested=requested, min_replicas=2, max_replicas=6, limited_by=limited_by
    )
    assert (limit.reason if limit else None) == reason


def test_next_status_fields_and_transition_times() -> None:
    decision = Decision(policy="edl", rule="edl.scale_up", reason="grew 2 -> 3")
    conditions = scaling_conditions(target="Deployment/t", current=3, limit=None)
    first = next_status(
        {},
        current=3,
        desired=3,
        decision=decision,
        conditions=conditions,
        generation=4,
        now=0.0,
        scaled=True,
    )
    assert first["currentReplicas"] == 3 and first["desiredReplicas"] == 3
    assert first["lastDecision"] == {
        "policy": "edl",
        "rule": "edl.scale_up",
        "reason": "grew 2 -> 3",
    }
    assert first["observedGeneration"] == 4
    assert first["lastScaleTime"] == "1970-01-01T00:00:00Z"
    by_type = {c["type"]: c for c in first["conditions"]}
    assert set(by_type) == {"Ready", "ScalingActive", "ScalingLimited"}
    assert by_type["ScalingLimited"]["status"] == "False"

    limited = scaling_conditions(
        target="Deployment/t",
        current=6,
        limit=replica_limit(requested=9, min_replicas=2, max_replicas=6, limited_by=None),
    )
    second = next_status(
        first,
        current=6,
        desired=6,
        decision=decision,
        conditions=limited,
        generation=4,
        now=60.0,
        scaled=False,
    )
    by_type = {c["type"]: c for c in second["conditions"]}
    # Unchanged statuses keep their transition time; the flipped one moves.
    assert by_type["Ready"]["lastTransitionTime"] == "1970-01-01T00:00:00Z"
    assert by_type["ScalingLimited"]["lastTransitionTime"] == "1970-01-01T00:01:00Z"
    assert by_type["ScalingLimited"]["reason"] == "TooManyReplicas"
    # No replica change: lastScaleTime stays.
    assert second["lastScaleTime"] == "1970-01-01T00:00:00Z"


def test_rfc3339() -> None:
    assert rfc3339(1_700_000_000.7) == "2023-11-14T22:13:20Z"


# --- rate limiting ---------------------------------------------------------------


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    slept: list[float] = []
    bucket = TokenBucket(10.0, 3, clock=clock, sleep=slept.append)
    for _ in range(3):
        bucket.acquire()
    assert slept == []
    bucket.acquire()
    assert slept == [pytest.approx(0.1)]
    clock.t += 1.0  # refills 10 tokens, capped at the burst of 3
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]


def test_token_bucket_rejects_bad_limits() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 1, clock=FakeClock())
    with pytest.raises(ValueError):
        TokenBucket(1, 0, clock=FakeClock())


def test_backoff_doubles_up_to_a_cap() -> None:
    backoff = Backoff(initial=0.5, maximum=3.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


# --- errors ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
def test_transient_statuses(status: int) -> None:
    assert isinstance(map_error(KubeApiError(status, reason="x"), action="a"), TransientScaleError)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_permanent_statuses(status: int) -> None:
    assert isinstance(map_error(KubeApiError(status, reason="x"), action="a"), PermanentScaleError)


def test_connection_errors_are_transient() -> None:
    assert isinstance(map_error(KubeConnectionError("reset"), action="a"), TransientScaleError)


@pytest.mark.parametrize("key", ["nonamespace", "/x", "ns/", "a/b/c"])
def test_bad_job_keys_are_permanent(key: str) -> None:
    with pytest.raises(PermanentScaleError):
        split_job_key(key)


# --- paths and kinds ---------------------------------------------------------------


def test_paths() -> None:
    assert NODES.collection_path("ignored") == "/api/v1/nodes"
    assert PODS.collection_path() == "/api/v1/pods"
    assert PODS.collection_path("ml") == "/api/v1/namespaces/ml/pods"
    assert DEPLOYMENTS.object_path("ml", "t", subresource="scale") == (
        "/apis/apps/v1/namespaces/ml/deployments/t/scale"
    )
    assert ELASTICJOBS.object_path("ml", "j", subresource="status") == (
        "/apis/trainscaler.io/v1alpha1/namespaces/ml/elasticjobs/j/status"
    )


def test_kind_resolver_uses_discovery_once_and_falls_back() -> None:
    asked: list[str] = []

    def fetch(path: str) -> dict[str, object]:
        asked.append(path)
        if path == "/apis/kubeflow.org/v1":
            return {
                "resources": [
                    {"name": "pytorchjobs/scale", "kind": "Scale"},
                    {"name": "pytorchjobs", "kind": "PyTorchJob"},
                ]
            }
        raise KubeApiError(404, reason="Not Found")

    resolver = KindResolver(fetch)
    assert resolver.resolve("apps/v1", "Deployment") == DEPLOYMENTS
    assert asked == []
    for _ in range(2):
        kind = resolver.resolve("kubeflow.org/v1", "PyTorchJob")
    assert kind.plural == "pytorchjobs" and asked == ["/apis/kubeflow.org/v1"]
    assert kind.object_path("ml", "p", subresource="scale") == (
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/p/scale"
    )
    assert resolver.resolve("batch.volcano.sh/v1alpha1", "Job").plural == "jobs"
