"""Deletion semantics (deletecollection, Orphan, namespace cleanup), binding,
cluster-scoped CRDs, cross-namespace reads, bookmarks and concurrent writers."""

from __future__ import annotations

import random
import string
import threading
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client, watch

from trainscaler_sim.apiserver import LoopbackApiServer

from .conftest import ROOT_CA, api_status, deployment_manifest, pod_manifest


def test_delete_collection_by_label(core, namespace):
    for name, role in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"role": role}}}
        )
    core.delete_collection_namespaced_config_map(namespace, label_selector="role=x")
    remaining = [item.metadata.name for item in core.list_namespaced_config_map(namespace).items]
    assert "a" not in remaining and "b" not in remaining and "c" in remaining


def test_orphan_propagation_keeps_dependents(cluster, apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("orph", replicas=0))
    cluster.wait_for(
        lambda: apps.list_namespaced_replica_set(namespace, label_selector="app=orph").items,
        what="the replicaset",
    )
    apps.delete_namespaced_deployment("orph", namespace, propagation_policy="Orphan")

    def orphaned():
        sets = apps.list_namespaced_replica_set(namespace, label_selector="app=orph").items
        return len(sets) == 1 and not sets[0].metadata.owner_references

    cluster.wait_for(orphaned, what="the replicaset to lose its owner reference")


def test_namespace_deletion_removes_contents(cluster, core):
    name = f"contract-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(name, {"metadata": {"name": "inside"}})
    core.delete_namespace(name)

    def gone():
        try:
            core.read_namespace(name)
        except client.ApiException as error:
            return error.status == 404
        return False

    cluster.wait_for(gone, what="the namespace to be deleted")
    assert not core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.namespace={name}"
    ).items


def test_create_in_missing_namespace_is_not_found(core):
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_config_map("no-such-namespace-x1", {"metadata": {"name": "a"}})
    assert api_status(caught.value) == (404, "NotFound")


def test_binding_assigns_a_node_once(cluster, core, namespace):
    node = core.list_node().items[0].metadata.name
    manifest = pod_manifest("manual")
    manifest["spec"]["schedulerName"] = "manual-scheduler"
    core.create_namespaced_pod(namespace, manifest)
    binding = {
        "metadata": {"name": "manual"},
        "target": {"kind": "Node", "name": node, "apiVersion": "v1"},
    }
    core.create_namespaced_pod_binding(
        "manual", namespace, cast(Any, binding), _preload_content=False
    )
    assert core.read_namespaced_pod("manual", namespace).spec.node_name == node
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_pod_binding(
            "manual", namespace, cast(Any, binding), _preload_content=False
        )
    assert caught.value.status == 409


def test_list_and_watch_across_namespaces(core, namespace):
    marker = uuid.uuid4().hex[:8]
    version = core.list_config_map_for_all_namespaces(
        label_selector=f"marker={marker}"
    ).metadata.resource_version
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "everywhere", "labels": {"marker": marker}}}
    )
    listed = core.list_config_map_for_all_namespaces(label_selector=f"marker={marker}").items
    assert [(item.metadata.namespace, item.metadata.name) for item in listed] == [
        (namespace, "everywhere")
    ]
    watcher = watch.Watch()
    seen = []
    for event in watcher.stream(
        core.list_config_map_for_all_namespaces,
        label_selector=f"marker={marker}",
        resource_version=version,
        timeout_seconds=20,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        watcher.stop()
    assert seen == [("ADDED", "everywhere")]


@pytest.fixture
def cluster_scoped_crd(cluster) -> Iterator[str]:
    extensions = client.ApiextensionsV1Api(cluster.api)
    suffix = "".join(random.choice(string.ascii_lowercase) for _ in range(8))
    plural = f"gadgets{suffix}"
    group = "contract.trainscaler.dev"
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Cluster",
            "names": {
                "plural": plural,
                "singular": f"gadget{suffix}",
                "kind": f"Gadget{suffix.capitalize()}",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    extensions.create_custom_resource_definition(cast(Any, body))
    try:
        yield plural
    finally:
        extensions.delete_custom_resource_definition(f"{plural}.{group}")


def test_cluster_scoped_custom_resources(cluster, custom, cluster_scoped_crd):
    group = "contract.trainscaler.dev"

    def create():
        try:
            return custom.create_cluster_custom_object(
                group,
                "v1",
                cluster_scoped_crd,
                {
                    "apiVersion": f"{group}/v1",
                    "kind": f"Gadget{cluster_scoped_crd.removeprefix('gadgets').capitalize()}",
                    "metadata": {"name": "g1"},
                    "spec": {"size": 1},
                },
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    created = cluster.wait_for(create, what="the cluster-scoped resource to be creatable")
    assert "namespace" not in created["metadata"]
    fetched = custom.get_cluster_custom_object(group, "v1", cluster_scoped_crd, "g1")
    assert fetched["spec"] == {"size": 1}
    status = custom.patch_cluster_custom_object(
        group, "v1", cluster_scoped_crd, "g1", {"status": {"ok": True}}
    )
    assert status["status"] == {"ok": True}  # no status subresource: status is ordinary content


def test_concurrent_read_modify_write_loses_no_update(core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "counter"}, "data": {"n": "0"}}
    )
    conflicts = []

    def increment(times):
        for _ in range(times):
            while True:
                current = core.read_namespaced_config_map("counter", namespace)
                current.data["n"] = str(int(current.data["n"]) + 1)
                try:
                    core.replace_namespaced_config_map("counter", namespace, current)
                    break
                except client.ApiException as error:
                    if error.status != 409:
                        raise
                    conflicts.append(1)

    threads = [threading.Thread(target=increment, args=(10,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert core.read_namespaced_config_map("counter", namespace).data["n"] == "60"


def test_bookmarks_carry_the_latest_version(loopback):
    with LoopbackApiServer(
        port=0, controllers=False, scheduler=False, bookmark_seconds=0.2
    ) as server:
        core: Any = client.CoreV1Api(server.api_client())
        version = core.list_namespaced_config_map("default").metadata.resource_version
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="elsewhere")))
        watcher = watch.Watch()
        kinds = []
        for event in watcher.stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=10,
        ):
            kinds.append(event["type"])
            watcher.stop()
        assert kinds == ["BOOKMARK"]
        assert int(str(watcher.resource_version)) > int(version)


def test_every_namespace_gets_the_root_ca_bundle(cluster, core, namespace):
    """kube-controller-manager's root-ca-cert-publisher: there from the start, and back
    after a delete."""
    bundle = core.read_namespaced_config_map(ROOT_CA, namespace)
    assert bundle.data["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")
    assert "kubernetes.io/description" in bundle.metadata.annotations
    core.delete_namespaced_config_map(ROOT_CA, namespace)

    def republished():
        try:
            return core.read_namespaced_config_map(ROOT_CA, namespace).metadata.uid
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    assert cluster.wait_for(republished, what="the bundle published again") != bundle.metadata.uid
