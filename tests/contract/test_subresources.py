"""/status separation and the autoscaling/v1 /scale subresource for
Deployments, StatefulSets, ReplicaSets and a CRD declaring scale."""

from __future__ import annotations

import random
import string
from typing import Any, cast

import pytest
from kubernetes import client

from .conftest import api_status, deployment_manifest, replicaset_manifest, statefulset_manifest

GROUP = "contract.trainscaler.dev"


def test_status_written_through_main_resource_is_ignored(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("st", replicas=0))
    body = {"spec": {"minReadySeconds": 5}, "status": {"observedGeneration": 99}}
    patched = apps.patch_namespaced_deployment("st", namespace, body)
    assert patched.spec.min_ready_seconds == 5
    assert patched.status.observed_generation != 99


def test_spec_written_through_status_is_ignored(apps, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("st2", replicas=0))
    body = {"spec": {"replicas": 7}, "status": {"observedGeneration": 42}}
    patched = apps.patch_namespaced_deployment_status("st2", namespace, body)
    assert patched.spec.replicas == 0
    assert patched.status.observed_generation == 42


def _creators(apps):
    return {
        "deployment": (
            lambda ns, name: apps.create_namespaced_deployment(
                ns, deployment_manifest(name, replicas=1)
            ),
            apps.read_namespaced_deployment_scale,
            apps.replace_namespaced_deployment_scale,
            apps.patch_namespaced_deployment_scale,
            apps.read_namespaced_deployment,
        ),
        "statefulset": (
            lambda ns, name: apps.create_namespaced_stateful_set(
                ns, statefulset_manifest(name, replicas=1)
            ),
            apps.read_namespaced_stateful_set_scale,
            apps.replace_namespaced_stateful_set_scale,
            apps.patch_namespaced_stateful_set_scale,
            apps.read_namespaced_stateful_set,
        ),
        "replicaset": (
            lambda ns, name: apps.create_namespaced_replica_set(
                ns, replicaset_manifest(name, replicas=1)
            ),
            apps.read_namespaced_replica_set_scale,
            apps.replace_namespaced_replica_set_scale,
            apps.patch_namespaced_replica_set_scale,
            apps.read_namespaced_replica_set,
        ),
    }


@pytest.mark.parametrize("kind", ["deployment", "statefulset", "replicaset"])
def test_scale_subresource_of_apps_kinds(apps, namespace, kind):
    create, read_scale, replace_scale, patch_scale, read = _creators(apps)[kind]
    create(namespace, kind)
    scale = read_scale(kind, namespace)
    assert (scale.kind, scale.api_version) == ("Scale", "autoscaling/v1")
    assert scale.spec.replicas == 1
    assert scale.status.selector == f"app={kind}"
    stale_version = scale.metadata.resource_version
    scale.spec.replicas = 3
    # Controllers write status concurrently, so this PUT is unconditional.
    scale.metadata.resource_version = None
    assert replace_scale(kind, namespace, scale).spec.replicas == 3
    assert read(kind, namespace).spec.replicas == 3
    assert read(kind, namespace).metadata.generation == 2
    stale = client.V1Scale(
        metadata=client.V1ObjectMeta(name=kind, resource_version=stale_version),
        spec=client.V1ScaleSpec(replicas=4),
    )
    with pytest.raises(client.ApiException) as caught:
        replace_scale(kind, namespace, stale)
    assert api_status(caught.value) == (409, "Conflict")
    # autoscaling/v1 ScaleSpec.replicas is omitempty: a Scale at 0 carries no replicas.
    assert patch_scale(kind, namespace, {"spec": {"replicas": 0}}).spec.replicas is None
    assert read(kind, namespace).spec.replicas == 0


def test_scale_patch_with_stale_resource_version_conflicts(apps, namespace):
    created = apps.create_namespaced_deployment(namespace, deployment_manifest("sc", replicas=1))
    apps.patch_namespaced_deployment_scale("sc", namespace, {"spec": {"replicas": 2}})
    body = {
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "spec": {"replicas": 5},
    }
    with pytest.raises(client.ApiException) as caught:
        apps.patch_namespaced_deployment_scale("sc", namespace, body)
    assert api_status(caught.value) == (409, "Conflict")


@pytest.fixture
def widget_crd(cluster):
    """A namespaced CRD with status and scale subresources (unique name per test)."""
    extensions = client.ApiextensionsV1Api(cluster.api)
    suffix = "".join(random.choice(string.ascii_lowercase) for _ in range(8))
    plural = f"widgets{suffix}"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": f"widget{suffix}",
                "kind": f"Widget{suffix.capitalize()}",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": schema,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.workers",
                            "statusReplicasPath": ".status.workers",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                }
            ],
        },
    }
    extensions.create_custom_resource_definition(cast(Any, body))

    def established():
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
        conditions = crd.status.conditions if crd.status is not None else None
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    cluster.wait_for(established, what="the CRD to be established")
    try:
        yield plural
    finally:
        extensions.delete_custom_resource_definition(f"{plural}.{GROUP}")


def _widget(name, workers, *, plural):
    return {
        "apiVersion": f"{GROUP}/v1",
        # The CRD's kind exactly: a real server answers 422 for any other.
        "kind": f"Widget{plural.removeprefix('widgets').capitalize()}",
        "metadata": {"name": name},
        "spec": {"workers": workers},
        "status": {"workers": 99},
    }


def _create_widget(cluster, custom, *, namespace, plural, name, workers):
    def attempt():
        try:
            return custom.create_namespaced_custom_object(
                GROUP, "v1", namespace, plural, _widget(name, workers, plural=plural)
            )
        except client.ApiException as error:
            if error.status == 404:  # a real apiserver may serve the new CRD a moment later
                return None
            raise

    return cluster.wait_for(attempt, what="the custom resource to be creatable")


def test_crd_is_served_with_status_subresource(cluster, custom, namespace, widget_crd):
    created = _create_widget(
        cluster, custom, namespace=namespace, plural=widget_crd, name="w1", workers=2
    )
    kind = created["kind"]
    assert "status" not in created or created["status"].get("workers") != 99
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1", namespace, widget_crd, "w1", {"status": {"workers": 2, "selector": "app=w1"}}
    )
    ignored = custom.patch_namespaced_custom_object(
        GROUP, "v1", namespace, widget_crd, "w1", {"status": {"workers": 50}}
    )
    assert ignored["status"]["workers"] == 2
    listed = custom.list_namespaced_custom_object(GROUP, "v1", namespace, widget_crd)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]
    assert listed["items"][0]["kind"] == kind


def test_crd_scale_subresource(cluster, custom, namespace, widget_crd):
    _create_widget(cluster, custom, namespace=namespace, plural=widget_crd, name="w2", workers=2)
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1", namespace, widget_crd, "w2", {"status": {"workers": 1, "selector": "job=w2"}}
    )
    scale = custom.get_namespaced_custom_object_scale(GROUP, "v1", namespace, widget_crd, "w2")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 1, "selector": "job=w2"}
    scale["spec"]["replicas"] = 4
    replaced = custom.replace_namespaced_custom_object_scale(
        GROUP, "v1", namespace, widget_crd, "w2", scale
    )
    assert replaced["spec"]["replicas"] == 4
    with pytest.raises(client.ApiException) as caught:
        custom.replace_namespaced_custom_object_scale(
            GROUP, "v1", namespace, widget_crd, "w2", scale
        )
    assert api_status(caught.value) == (409, "Conflict")
    custom.patch_namespaced_custom_object_scale(
        GROUP, "v1", namespace, widget_crd, "w2", {"spec": {"replicas": 6}}
    )
    widget = custom.get_namespaced_custom_object(GROUP, "v1", namespace, widget_crd, "w2")
    assert widget["spec"]["workers"] == 6
    assert widget["metadata"]["generation"] == 3


def test_crd_json_patch_and_stale_put(cluster, custom, namespace, widget_crd):
    created = _create_widget(
        cluster, custom, namespace=namespace, plural=widget_crd, name="w3", workers=1
    )
    ops = [{"op": "replace", "path": "/spec/workers", "value": 5}]
    patched = custom.patch_namespaced_custom_object(
        GROUP, "v1", namespace, widget_crd, "w3", ops, _content_type="application/json-patch+json"
    )
    assert patched["spec"]["workers"] == 5
    created["spec"]["workers"] = 7
    with pytest.raises(client.ApiException) as caught:
        custom.replace_namespaced_custom_object(GROUP, "v1", namespace, widget_crd, "w3", created)
    assert api_status(caught.value) == (409, "Conflict")


def test_crd_rejects_strategic_merge_and_unversioned_put(cluster, custom, namespace, widget_crd):
    created = _create_widget(
        cluster, custom, namespace=namespace, plural=widget_crd, name="w4", workers=1
    )
    with pytest.raises(client.ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            namespace,
            widget_crd,
            "w4",
            {"spec": {"workers": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert caught.value.status == 415
    del created["metadata"]["resourceVersion"]
    with pytest.raises(client.ApiException) as caught:
        custom.replace_namespaced_custom_object(GROUP, "v1", namespace, widget_crd, "w4", created)
    assert api_status(caught.value) == (422, "Invalid")


def test_horizontal_pod_autoscalers_are_served(cluster, namespace):
    autoscaling: Any = client.AutoscalingV1Api(cluster.api)
    body = {
        "metadata": {"name": "hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 4,
            "targetCPUUtilizationPercentage": 80,
        },
    }
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, body)
    read = autoscaling.read_namespaced_horizontal_pod_autoscaler("hpa", namespace)
    assert (read.spec.max_replicas, read.spec.scale_target_ref.name) == (4, "web")
    assert read.status.desired_replicas is not None
    names = {resource.name for resource in autoscaling.get_api_resources().resources}
    assert "horizontalpodautoscalers/status" in names
