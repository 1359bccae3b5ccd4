"""CRUD contract: server-filled metadata, defaults the typed client needs,
AlreadyExists / NotFound / Invalid Status answers, generateName, generation."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from .conftest import (
    api_status,
    deployment_manifest,
    pod_manifest,
    replicaset_manifest,
    statefulset_manifest,
)


def test_create_fills_server_metadata(core, namespace):
    created = core.create_namespaced_pod(namespace, pod_manifest("meta"))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp is not None
    assert meta.namespace == namespace
    assert int(meta.resource_version) > 0
    assert created.status.phase == "Pending" or created.status.phase == "Running"
    fetched = core.read_namespaced_pod("meta", namespace)
    assert fetched.metadata.uid == meta.uid


def test_resource_versions_increase_across_kinds(core, apps, namespace):
    first = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    second = apps.create_namespaced_deployment(namespace, deployment_manifest("rv", replicas=0))
    third = core.patch_namespaced_config_map("a", namespace, {"data": {"k": "w"}})
    versions = [int(obj.metadata.resource_version) for obj in (first, second, third)]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_duplicate_create_is_already_exists(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "dup"}})
    assert api_status(caught.value) == (409, "AlreadyExists")


def test_missing_object_is_not_found(core, apps, namespace):
    with pytest.raises(client.ApiException) as caught:
        core.read_namespaced_pod("absent", namespace)
    assert api_status(caught.value) == (404, "NotFound")
    with pytest.raises(client.ApiException) as caught:
        apps.delete_namespaced_deployment("absent", namespace)
    assert api_status(caught.value) == (404, "NotFound")


def test_missing_name_is_invalid(core, namespace):
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_config_map(namespace, {"metadata": {}, "data": {}})
    assert api_status(caught.value) == (422, "Invalid")


def test_pod_without_containers_is_invalid(core, namespace):
    manifest = pod_manifest("empty")
    manifest["spec"]["containers"] = []
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_pod(namespace, manifest)
    assert api_status(caught.value) == (422, "Invalid")


def test_generate_name_makes_unique_names(core, namespace):
    names = {
        core.create_namespaced_pod(namespace, pod_manifest("", generate_name="gen-")).metadata.name
        for _ in range(5)
    }
    assert len(names) == 5
    assert all(name.startswith("gen-") and len(name) > len("gen-") for name in names)


def test_generation_bumps_on_spec_changes_only(apps, namespace):
    created = apps.create_namespaced_deployment(namespace, deployment_manifest("gen", replicas=0))
    assert created.metadata.generation == 1
    labelled = apps.patch_namespaced_deployment(
        "gen", namespace, {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled.metadata.generation == 1
    scaled = apps.patch_namespaced_deployment("gen", namespace, {"spec": {"replicas": 2}})
    assert scaled.metadata.generation == 2
    status = {"status": {"observedGeneration": 2, "replicas": 0}}
    after_status = apps.patch_namespaced_deployment_status("gen", namespace, status)
    assert after_status.metadata.generation == 2


def test_typed_reads_of_every_workload_kind(apps, batch, namespace):
    """kubernetes>=37 rejects responses missing required fields (e.g. sts status.replicas)."""
    apps.create_namespaced_stateful_set(namespace, statefulset_manifest("sts", replicas=0))
    apps.create_namespaced_replica_set(namespace, replicaset_manifest("rs", replicas=0))
    apps.create_namespaced_deployment(namespace, deployment_manifest("dep", replicas=0))
    template = {"spec": {**pod_manifest("job")["spec"], "restartPolicy": "Never"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job"},
        "spec": {"parallelism": 0, "template": template},
    }
    batch.create_namespaced_job(namespace, job)
    assert apps.read_namespaced_stateful_set("sts", namespace).status.replicas == 0
    assert apps.read_namespaced_replica_set("rs", namespace).status.replicas == 0
    assert apps.read_namespaced_deployment("dep", namespace).spec.replicas == 0
    assert batch.read_namespaced_job("job", namespace).spec.parallelism == 0
    assert len(apps.list_namespaced_stateful_set(namespace).items) == 1
    assert len(apps.list_namespaced_replica_set(namespace).items) >= 1
    assert len(batch.list_namespaced_job(namespace).items) == 1


def test_nodes_and_namespaces_deserialize(core, namespace):
    nodes = core.list_node().items
    assert nodes and all(node.status is not None for node in nodes)
    assert core.read_namespace(namespace).status.phase == "Active"


def test_core_and_events_v1_share_events(cluster, core, namespace):
    involved = {"kind": "Pod", "name": "p", "namespace": namespace, "apiVersion": "v1"}
    # eventTime set: the python client rejects events.k8s.io reads whose eventTime is null.
    # It is a MicroTime (RFC3339 with exactly six fractional digits); the client sends
    # datetime.isoformat(), which drops the fraction when it is zero: hence .000001.
    core.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "ev1"},
            "involvedObject": involved,
            "reason": "Scaled",
            "message": "scaled to 3",
            "type": "Normal",
            "eventTime": "2026-01-01T00:00:00.000001Z",
            "reportingComponent": "trainscaler.dev/scaler",
            "reportingInstance": "worker-0",
            "action": "Scale",
        },
    )
    events_v1: Any = client.EventsV1Api(cluster.api)
    listed = events_v1.list_namespaced_event(namespace).items
    assert [(e.reason, e.note, e.regarding.name) for e in listed] == [
        ("Scaled", "scaled to 3", "p")
    ]
    events_v1.create_namespaced_event(
        namespace,
        {
            "metadata": {"name": "ev2"},
            "eventTime": "2026-01-01T00:00:01.000001Z",
            "reportingController": "trainscaler.dev/scaler",
            "reportingInstance": "worker-1",
            "action": "Scale",
            "reason": "ScaledDown",
            "note": "scaled to 1",
            "regarding": involved,
            "type": "Normal",
        },
    )
    selected = core.list_namespaced_event(namespace, field_selector="reason=ScaledDown").items
    assert [(e.message, e.involved_object.name) for e in selected] == [("scaled to 1", "p")]


def test_update_replaces_the_object(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    current = core.read_namespaced_config_map("cm", namespace)
    current.data = {"b": "2"}
    replaced = core.replace_namespaced_config_map("cm", namespace, current)
    assert replaced.data == {"b": "2"}
    assert int(replaced.metadata.resource_version) > int(current.metadata.resource_version)


def test_delete_returns_and_removes(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("gone"))
    deleted = core.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)
    assert deleted.metadata.name == "gone"

    def vanished():
        try:
            core.read_namespaced_pod("gone", namespace)
        except client.ApiException as error:
            return error.status == 404
        return False

    cluster.wait_for(vanished, what="the pod to disappear")  # a kubelet may take a moment
