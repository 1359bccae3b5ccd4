"""Optimistic concurrency (409 on stale resourceVersion for PUT and PATCH) and
the three PATCH content types."""

from __future__ import annotations

import pytest
from kubernetes import client

from .conftest import api_status, deployment_manifest, pod_manifest


def test_put_with_stale_resource_version_conflicts(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    stale = core.read_namespaced_config_map("cm", namespace)
    core.patch_namespaced_config_map("cm", namespace, {"data": {"v": "2"}})
    stale.data = {"v": "3"}
    with pytest.raises(client.ApiException) as caught:
        core.replace_namespaced_config_map("cm", namespace, stale)
    assert api_status(caught.value) == (409, "Conflict")
    assert core.read_namespaced_config_map("cm", namespace).data == {"v": "2"}


def test_patch_carrying_stale_resource_version_conflicts(core, namespace):
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", namespace, {"data": {"v": "2"}})
    body = {"metadata": {"resourceVersion": created.metadata.resource_version}, "data": {"v": "3"}}
    with pytest.raises(client.ApiException) as caught:
        core.patch_namespaced_config_map("cm", namespace, body)
    assert api_status(caught.value) == (409, "Conflict")
    fresh = core.read_namespaced_config_map("cm", namespace)
    body["metadata"]["resourceVersion"] = fresh.metadata.resource_version
    assert core.patch_namespaced_config_map("cm", namespace, body).data == {"v": "3"}


def test_put_without_resource_version_is_unconditional_for_builtins(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    replaced = core.replace_namespaced_config_map(
        "cm", namespace, {"metadata": {"name": "cm"}, "data": {"v": "9"}}
    )
    assert replaced.data == {"v": "9"}


def test_merge_patch_merges_maps_and_null_deletes(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "cm", "labels": {"a": "1", "b": "2"}}}
    )
    patched = core.patch_namespaced_config_map(
        "cm",
        namespace,
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched.metadata.labels == {"b": "2", "c": "3"}


def test_strategic_merge_patch_merges_containers_by_name(apps, namespace):
    manifest = deployment_manifest("smp", replicas=0)
    manifest["spec"]["template"]["spec"]["containers"].append(
        {"name": "side", "image": "busybox:1"}
    )
    apps.create_namespaced_deployment(namespace, manifest)
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "side", "image": "busybox:2"}]}}}
    }
    patched = apps.patch_namespaced_deployment(
        "smp", namespace, patch, _content_type="application/strategic-merge-patch+json"
    )
    images = {c.name: c.image for c in patched.spec.template.spec.containers}
    assert images == {"main": "registry.k8s.io/pause:3.9", "side": "busybox:2"}
    merged = apps.patch_namespaced_deployment(
        "smp", namespace, patch, _content_type="application/merge-patch+json"
    )
    assert [c.name for c in merged.spec.template.spec.containers] == ["side"]


def test_strategic_merge_patch_delete_directive(apps, namespace):
    manifest = deployment_manifest("smpdel", replicas=0)
    manifest["spec"]["template"]["spec"]["containers"].append(
        {"name": "side", "image": "busybox:1"}
    )
    apps.create_namespaced_deployment(namespace, manifest)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}}}
    patched = apps.patch_namespaced_deployment("smpdel", namespace, patch)
    assert [c.name for c in patched.spec.template.spec.containers] == ["main"]


def test_strategic_merge_patch_merges_conditions_by_type(core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("conds", requests={"example.com/none": "1"}))
    condition = {"type": "example.com/Checked", "status": "True"}
    core.patch_namespaced_pod_status("conds", namespace, {"status": {"conditions": [condition]}})
    updated = {"type": "example.com/Checked", "status": "False"}
    pod = core.patch_namespaced_pod_status(
        "conds", namespace, {"status": {"conditions": [updated]}}
    )
    mine = [c for c in pod.status.conditions if c.type == "example.com/Checked"]
    assert [c.status for c in mine] == ["False"]


def test_json_patch_operations_and_failed_test(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "cm", "labels": {"k": "v"}}, "data": {"a": "1", "b": "2"}}
    )
    ops = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/data/c", "value": "3"},
        # "~1" escapes "/" (ConfigMap keys may not hold one; label keys may).
        {"op": "add", "path": "/metadata/labels/example.com~1d", "value": "4"},
        {"op": "copy", "from": "/data/a", "path": "/data/e"},
        {"op": "move", "from": "/data/e", "path": "/data/f"},
    ]
    patched = core.patch_namespaced_config_map(
        "cm", namespace, ops, _content_type="application/json-patch+json"
    )
    assert patched.data == {"a": "10", "c": "3", "f": "10"}
    assert patched.metadata.labels == {"k": "v", "example.com/d": "4"}
    failing = [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "remove", "path": "/data/a"}]
    with pytest.raises(client.ApiException) as caught:
        core.patch_namespaced_config_map(
            "cm", namespace, failing, _content_type="application/json-patch+json"
        )
    assert caught.value.status == 422
    assert core.read_namespaced_config_map("cm", namespace).data["a"] == "10"


def test_json_patch_test_on_resource_version_guards_writes(core, namespace):
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", namespace, {"data": {"x": "1"}})
    guarded = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": created.metadata.resource_version,
        },
        {"op": "add", "path": "/data/y", "value": "2"},
    ]
    with pytest.raises(client.ApiException) as caught:
        core.patch_namespaced_config_map(
            "cm", namespace, guarded, _content_type="application/json-patch+json"
        )
    assert caught.value.status == 422
