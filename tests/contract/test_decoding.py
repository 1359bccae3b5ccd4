"""How the server decodes and checks request bodies, found by running this suite
against kube-apiserver (issue 17): kind/apiVersion checks for built-in and
custom kinds, MicroTime's fixed format, ObjectMeta's omitempty maps and
ConfigMap key validation. Bodies go out as raw JSON (the typed client would
rewrite them)."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
from kubernetes import client


def send(cluster, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    """One raw JSON request; (status, decoded body)."""
    api = cluster.api
    response = api.call_api(
        *api.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
    )
    response.read()
    try:
        return response.status, json.loads(response.data or b"{}")
    except ValueError:  # e.g. "404 page not found" while a new CRD is not served yet
        return response.status, {"text": response.data.decode(errors="replace")}


def test_builtin_body_may_omit_type_meta_but_not_contradict_it(cluster, namespace):
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, created = send(cluster, "POST", path, {"metadata": {"name": "plain"}})
    assert status == 201 and (created["kind"], created["apiVersion"]) == ("ConfigMap", "v1")
    status, answer = send(
        cluster, "POST", path, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "x"}}
    )
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"].startswith('Secret in version "v1" cannot be handled as a ConfigMap')
    status, answer = send(
        cluster,
        "POST",
        path,
        {"kind": "ConfigMap", "apiVersion": "apps/v1", "metadata": {"name": "y"}},
    )
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert 'no kind "ConfigMap" is registered for version "apps/v1"' in answer["message"]


@pytest.fixture
def thing_crd(cluster):
    extensions = client.ApiextensionsV1Api(cluster.api)
    suffix = "".join(random.choice(string.ascii_lowercase) for _ in range(8))
    plural, kind = f"things{suffix}", f"Thing{suffix.capitalize()}"
    group = "contract.trainscaler.dev"
    body: Any = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": f"thing{suffix}", "kind": kind},
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
    extensions.create_custom_resource_definition(body)
    try:
        yield group, plural, kind
    finally:
        extensions.delete_custom_resource_definition(f"{plural}.{group}")


def test_custom_resource_must_name_its_kind_and_version(cluster, namespace, thing_crd):
    group, plural, kind = thing_crd
    path = f"/apis/{group}/v1/namespaces/{namespace}/{plural}"
    good = {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": "ok"}}
    cluster.wait_for(
        lambda: send(cluster, "POST", path, good)[0] == 201, what="the CRD served and a create"
    )
    status, answer = send(cluster, "POST", path, {**good, "kind": "Thing"})
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"].endswith(f'kind: Invalid value: "Thing": must be {kind}')
    status, answer = send(cluster, "POST", path, {**good, "apiVersion": f"{group}/v9"})
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == (
        f"the API version in the data ({group}/v9) does not match the expected API "
        f"version ({group}/v1)"
    )
    no_kind = {"apiVersion": f"{group}/v1", "metadata": {"name": "nokind"}}
    status, answer = send(cluster, "POST", path, no_kind)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "Object 'Kind' is missing" in answer["message"]


@pytest.mark.parametrize(
    ("event_time", "accepted"),
    [
        ("2026-01-01T00:00:00.000000Z", True),
        ("2026-01-01T00:00:00.123456+02:00", True),
        ("2026-01-01T00:00:00Z", False),
        ("2026-01-01T00:00:00+00:00", False),
        ("2026-01-01T00:00:00.123Z", False),
    ],
)
def test_event_time_is_a_micro_time(cluster, namespace, event_time, accepted):
    body = {
        "metadata": {"generateName": "ev-"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "Checked",
        "eventTime": event_time,
        "reportingComponent": "trainscaler.dev/contract",
        "reportingInstance": "test",
        "action": "Check",
    }
    status, answer = send(cluster, "POST", f"/api/v1/namespaces/{namespace}/events", body)
    if accepted:
        assert status == 201, answer
    else:
        assert (status, answer["reason"]) == (400, "BadRequest"), answer
        assert f'parsing time "{event_time}"' in answer["message"]


def test_empty_label_and_annotation_maps_are_not_stored(cluster, namespace):
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    body = {"metadata": {"name": "bare", "labels": {}, "annotations": {}}}
    status, created = send(cluster, "POST", path, body)
    assert status == 201
    assert "labels" not in created["metadata"] and "annotations" not in created["metadata"]


@pytest.mark.parametrize("key", ["c/d", "with space", ".."])
def test_config_map_keys_are_file_names(core, namespace, key):
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "keys"}, "data": {key: "1"}}
        )
    body = json.loads(str(caught.value.body))
    assert (caught.value.status, body["reason"]) == (422, "Invalid")
    assert f"data[{key}]" in body["message"]
