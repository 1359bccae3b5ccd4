"""Label selectors (every operator) and field selectors on list, plus the 400
answer for a field the resource does not support."""

from __future__ import annotations

import pytest
from kubernetes import client

from .conftest import ROOT_CA, api_status, pod_manifest

LABELS = {
    "a": {"tier": "web", "env": "prod"},
    "b": {"tier": "db", "env": "prod"},
    "c": {"tier": "web", "env": "dev", "canary": "true"},
    "d": {},
}


@pytest.fixture
def labelled(core, namespace):
    for name, labels in LABELS.items():
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": labels}})
    return namespace


def names(core, namespace, **kwargs):
    """The test's ConfigMaps that match (the unlabelled root CA bundle left out)."""
    listed = core.list_namespaced_config_map(namespace, **kwargs).items
    return sorted(item.metadata.name for item in listed if item.metadata.name != ROOT_CA)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", ["a", "c"]),
        ("tier==web", ["a", "c"]),
        ("tier!=web", ["b", "d"]),
        ("tier in (web,db)", ["a", "b", "c"]),
        ("env notin (prod)", ["c", "d"]),
        ("canary", ["c"]),
        ("!canary", ["a", "b", "d"]),
        ("tier=web,env=prod", ["a"]),
        ("tier in (web),!canary", ["a"]),
    ],
)
def test_label_selector_operators(core, labelled, selector, expected):
    assert names(core, labelled, label_selector=selector) == expected


def test_malformed_label_selector_is_bad_request(core, labelled):
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_config_map(labelled, label_selector="tier in (web")
    assert api_status(caught.value)[0] == 400


def test_field_selector_on_name_and_namespace(core, labelled):
    assert names(core, labelled, field_selector="metadata.name=b") == ["b"]
    assert names(core, labelled, field_selector="metadata.name==b") == ["b"]
    assert names(core, labelled, field_selector="metadata.name!=b") == ["a", "c", "d"]
    assert names(core, labelled, field_selector=f"metadata.namespace={labelled}") == list("abcd")


def test_pod_field_selectors(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("placed"))
    unplaceable = pod_manifest("stuck", requests={"example.com/unobtainium": "1"})
    core.create_namespaced_pod(namespace, unplaceable)
    placed = cluster.wait_for(
        lambda: core.read_namespaced_pod("placed", namespace).spec.node_name,
        what="the pod to be scheduled",
    )
    pods = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={placed}").items
    assert [pod.metadata.name for pod in pods] == ["placed"]
    pending = core.list_namespaced_pod(namespace, field_selector="status.phase=Pending").items
    assert "stuck" in [pod.metadata.name for pod in pending]
    unbound = core.list_namespaced_pod(namespace, field_selector="spec.nodeName=").items
    assert [pod.metadata.name for pod in unbound] == ["stuck"]
    not_pending = core.list_namespaced_pod(namespace, field_selector="status.phase!=Pending").items
    assert "stuck" not in [pod.metadata.name for pod in not_pending]


def test_unsupported_field_selector_is_bad_request(core, namespace):
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_pod(namespace, field_selector="spec.containers=x")
    assert api_status(caught.value) == (400, "BadRequest")


def test_label_and_field_selectors_combine(core, labelled):
    assert names(core, labelled, label_selector="tier=web", field_selector="metadata.name!=a") == [
        "c"
    ]
