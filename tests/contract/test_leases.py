"""``coordination.k8s.io/v1`` Leases, as leader election uses them: discovery,
CRUD with MicroTime fields, optimistic concurrency (409 on a stale
resourceVersion, AlreadyExists on a second create), watch events, and the
planner's ``LeaderElector`` over the same server."""

from __future__ import annotations

import time

import pytest
from kubernetes import client, watch

from workers.adapters.kubernetes.client import KubeClient, MonotonicClock, WallClock
from workers.adapters.kubernetes.lease import (
    LEASES,
    ElectionTiming,
    LeaderElector,
    LeaseRecord,
    micro_time,
)

from .conftest import api_status

MICRO = "2026-01-02T03:04:05.123456Z"


def _lease(name: str, *, holder: str = "a", renew: str = MICRO) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": MICRO,
            "renewTime": renew,
            "leaseTransitions": 0,
        },
    }


@pytest.fixture
def coordination(cluster) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(cluster.api)


def test_discovery_serves_leases(cluster):
    apis = client.ApisApi(cluster.api).get_api_versions()
    group = next(g for g in apis.groups if g.name == "coordination.k8s.io")
    preferred = group.preferred_version
    assert preferred is not None and preferred.version == "v1"
    resources = client.CoordinationV1Api(cluster.api).get_api_resources()
    assert resources.group_version == "coordination.k8s.io/v1"
    leases = next(r for r in resources.resources if r.name == "leases")
    assert leases.kind == "Lease" and leases.namespaced
    assert {"create", "delete", "get", "list", "patch", "update", "watch"} <= set(leases.verbs)


def test_lease_crud_keeps_micro_times(coordination, namespace):
    created = coordination.create_namespaced_lease(namespace, _lease("crud"))
    assert created.spec.holder_identity == "a"
    assert created.spec.renew_time.microsecond == 123456
    raw = client.ApiClient.sanitize_for_serialization(
        coordination.api_client, coordination.read_namespaced_lease("crud", namespace)
    )
    assert raw["spec"]["acquireTime"].endswith(".123456+00:00")
    created.spec.holder_identity = "b"
    created.spec.lease_transitions = 1
    replaced = coordination.replace_namespaced_lease("crud", namespace, created)
    assert (replaced.spec.holder_identity, replaced.spec.lease_transitions) == ("b", 1)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    patched = coordination.patch_namespaced_lease(
        "crud", namespace, {"spec": {"leaseDurationSeconds": 30}}
    )
    assert patched.spec.lease_duration_seconds == 30 and patched.spec.holder_identity == "b"
    names = [item.metadata.name for item in coordination.list_namespaced_lease(namespace).items]
    assert names == ["crud"]
    coordination.delete_namespaced_lease("crud", namespace)
    with pytest.raises(client.ApiException) as gone:
        coordination.read_namespaced_lease("crud", namespace)
    assert api_status(gone.value) == (404, "NotFound")


def test_a_second_create_is_already_exists(coordination, namespace):
    coordination.create_namespaced_lease(namespace, _lease("once"))
    with pytest.raises(client.ApiException) as caught:
        coordination.create_namespaced_lease(namespace, _lease("once", holder="b"))
    assert api_status(caught.value) == (409, "AlreadyExists")
    assert coordination.read_namespaced_lease("once", namespace).spec.holder_identity == "a"


def test_a_stale_resource_version_conflicts(coordination, namespace):
    coordination.create_namespaced_lease(namespace, _lease("occ"))
    first = coordination.read_namespaced_lease("occ", namespace)
    second = coordination.read_namespaced_lease("occ", namespace)
    first.spec.holder_identity = "a2"
    coordination.replace_namespaced_lease("occ", namespace, first)
    second.spec.holder_identity = "b"
    with pytest.raises(client.ApiException) as caught:
        coordination.replace_namespaced_lease("occ", namespace, second)
    assert api_status(caught.value) == (409, "Conflict")
    assert coordination.read_namespaced_lease("occ", namespace).spec.holder_identity == "a2"


def test_watch_sees_lease_changes(coordination, namespace):
    version = coordination.list_namespaced_lease(namespace).metadata.resource_version
    coordination.create_namespaced_lease(namespace, _lease("w"))
    coordination.patch_namespaced_lease("w", namespace, {"spec": {"holderIdentity": "b"}})
    coordination.delete_namespaced_lease("w", namespace)
    seen: list[tuple[str, str | None]] = []
    watcher = watch.Watch()
    for event in watcher.stream(
        coordination.list_namespaced_lease,
        namespace,
        resource_version=version,
        timeout_seconds=20,
    ):
        seen.append((event["type"], event["object"].spec.holder_identity))
        if event["type"] == "DELETED":
            watcher.stop()
    assert seen == [("ADDED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]


def test_leader_elector_acquires_renews_and_releases(cluster, namespace):
    kube = KubeClient(cluster.api)
    timing = ElectionTiming(lease_duration_s=15, renew_deadline_s=10.0, retry_period_s=2.0)

    def elector(identity: str) -> LeaderElector:
        return LeaderElector(
            client=kube,
            namespace=namespace,
            name="planner",
            identity=identity,
            clock=MonotonicClock(),
            wall_clock=WallClock(),
            timing=timing,
        )

    a, b = elector("a"), elector("b")
    assert a.try_acquire_or_renew()  # creates the Lease
    assert not b.try_acquire_or_renew()
    before = LeaseRecord.from_lease(kube.request("GET", LEASES.object_path(namespace, "planner")))
    time.sleep(0.01)
    assert a.try_acquire_or_renew()
    after = LeaseRecord.from_lease(kube.request("GET", LEASES.object_path(namespace, "planner")))
    # The server keeps MicroTime precision: a renewal moves renewTime, not acquireTime.
    assert after.acquire_time == before.acquire_time
    assert after.renew_time != before.renew_time
    assert a.release()
    assert b.try_acquire_or_renew()
    held = LeaseRecord.from_lease(kube.request("GET", LEASES.object_path(namespace, "planner")))
    assert (held.holder, held.transitions) == ("b", 1)


def test_micro_time_has_six_fraction_digits():
    assert micro_time(0.5) == "1970-01-01T00:00:00.500000Z"
