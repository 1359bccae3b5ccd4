"""Watch: initial state, timeoutSeconds, resume from a resourceVersion without
duplicates or gaps, 410 Gone for too-old versions, selector enter/leave."""

from __future__ import annotations

import time

import pytest
from kubernetes import client, watch

from .conftest import deployment_manifest


def _cm(name, labels=None, *, data=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


def collect_until(list_call, *args, sentinel: str, timeout: int = 20, **kwargs):
    """(type, name) of events until the sentinel object's event arrives."""
    seen = []
    watcher = watch.Watch()
    for event in watcher.stream(list_call, *args, timeout_seconds=timeout, **kwargs):
        seen.append((event["type"], event["object"].metadata.name))
        if event["object"].metadata.name == sentinel:
            watcher.stop()
    assert seen and seen[-1][1] == sentinel, f"sentinel never arrived: {seen}"
    return seen[:-1]


def test_watch_without_version_starts_with_current_objects(core, namespace):
    for name in ("a", "b"):
        core.create_namespaced_config_map(namespace, _cm(name))
    events = []
    watcher = watch.Watch()
    for event in watcher.stream(core.list_namespaced_config_map, namespace, timeout_seconds=10):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 2:
            watcher.stop()
    assert sorted(events) == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_ends_after_timeout_seconds(core, namespace):
    started = time.monotonic()
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            namespace,
            resource_version=core.list_namespaced_config_map(namespace).metadata.resource_version,
            timeout_seconds=1,
        )
    )
    elapsed = time.monotonic() - started
    assert events == []
    assert 0.9 <= elapsed < 4.0


def test_resume_from_resource_version_has_no_gaps_or_duplicates(core, namespace):
    core.create_namespaced_config_map(namespace, _cm("a"))
    core.create_namespaced_config_map(namespace, _cm("b"))
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("c"))
    core.patch_namespaced_config_map("a", namespace, {"data": {"k": "v"}})
    core.delete_namespaced_config_map("b", namespace)
    core.create_namespaced_config_map(namespace, _cm("zz-sentinel"))
    events = collect_until(
        core.list_namespaced_config_map, namespace, resource_version=version, sentinel="zz-sentinel"
    )
    assert events == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]

    watcher = watch.Watch()
    resumed = []
    for event in watcher.stream(
        core.list_namespaced_config_map, namespace, resource_version=version, timeout_seconds=20
    ):
        resumed.append(event)
        if len(resumed) == 2:
            watcher.stop()
    middle = resumed[1]["object"].metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("zz-sentinel-2"))
    rest = collect_until(
        core.list_namespaced_config_map,
        namespace,
        resource_version=middle,
        sentinel="zz-sentinel-2",
    )
    assert rest == [("DELETED", "b"), ("ADDED", "zz-sentinel")]


def test_too_old_resource_version_is_gone(cluster, core, namespace):
    """A version older than the watch history is 410 Gone. kube-apiserver's watch cache
    keeps at least 75 s and a hundred events, so on a young cluster version 1 is still
    there: the probe adds history until it falls out (the loopback server answers 410
    at once)."""

    def gone():
        try:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace,
                    resource_version="1",
                    timeout_seconds=1,
                )
            )
        except client.ApiException as error:
            return error
        for index in range(25):
            core.create_namespaced_config_map(namespace, _cm(f"churn-{index}", {"churn": "yes"}))
        core.delete_collection_namespaced_config_map(namespace, label_selector="churn=yes")
        return None

    error = cluster.wait_for(gone, what="version 1 to leave the watch history")
    assert error.status == 410
    assert "Expired" in str(error.reason) or "Gone" in str(error.reason)


def test_compacted_history_is_gone(loopback, core, namespace):
    core.create_namespaced_config_map(namespace, _cm("a"))
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("b"))
    loopback.compact()
    with pytest.raises(client.ApiException) as caught:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=version,
                timeout_seconds=5,
            )
        )
    assert caught.value.status == 410
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_config_map(
            namespace, resource_version=version, resource_version_match="Exact"
        )
    assert caught.value.status == 410


def test_label_selector_enter_and_leave(core, namespace):
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("x"))
    core.patch_namespaced_config_map("x", namespace, {"metadata": {"labels": {"role": "worker"}}})
    core.patch_namespaced_config_map("x", namespace, {"data": {"k": "v"}})
    core.patch_namespaced_config_map("x", namespace, {"metadata": {"labels": {"role": None}}})
    core.create_namespaced_config_map(namespace, _cm("ignored"))
    core.create_namespaced_config_map(namespace, _cm("zz-sentinel", labels={"role": "worker"}))
    events = collect_until(
        core.list_namespaced_config_map,
        namespace,
        resource_version=version,
        label_selector="role=worker",
        sentinel="zz-sentinel",
    )
    assert events == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]


def test_field_selector_watch_sees_one_object(core, namespace):
    version = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, _cm("other"))
    core.create_namespaced_config_map(namespace, _cm("mine"))
    core.patch_namespaced_config_map("other", namespace, {"data": {"k": "v"}})
    core.delete_namespaced_config_map("mine", namespace)
    seen = []
    watcher = watch.Watch()
    for event in watcher.stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=version,
        field_selector="metadata.name=mine",
        timeout_seconds=20,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            watcher.stop()
    assert seen == [("ADDED", "mine"), ("DELETED", "mine")]


def test_typed_watch_of_deployments(apps, namespace):
    version = apps.list_namespaced_deployment(namespace).metadata.resource_version
    apps.create_namespaced_deployment(namespace, deployment_manifest("zz-sentinel", replicas=0))
    watcher = watch.Watch()
    for event in watcher.stream(
        apps.list_namespaced_deployment, namespace, resource_version=version, timeout_seconds=20
    ):
        deployment = event["object"]
        assert isinstance(deployment, client.V1Deployment)
        if deployment.metadata is not None and deployment.metadata.name == "zz-sentinel":
            watcher.stop()
            break
    else:
        pytest.fail("no deployment event")
