"""OpenAPI contract: the /openapi/v3 index and group/version documents kubectl reads for
``explain`` and for server-side field validation, and /openapi/v2 as JSON."""

from __future__ import annotations

from .schema_fixtures import GROUP, gadget_crd, raw_request

__all__ = ["gadget_crd"]


def _index(cluster):
    response = raw_request(cluster.api, "GET", "/openapi/v3")
    assert response.status == 200
    return response.body["paths"]


def _document(cluster, key):
    url = _index(cluster)[key]["serverRelativeURL"]
    path, _, query = url.partition("?")
    pairs = [tuple(part.split("=", 1)) for part in query.split("&") if "=" in part]
    response = raw_request(cluster.api, "GET", path, query=pairs)
    assert response.status == 200
    return response.body


def _patch_operation(document, gvk):
    for item in document["paths"].values():
        patch = item.get("patch")
        if patch and patch.get("x-kubernetes-group-version-kind") == gvk:
            return patch
    raise AssertionError(f"no PATCH operation for {gvk}")


def test_v3_index_lists_group_versions(cluster):
    paths = _index(cluster)
    for key in ("api/v1", "apis/apps/v1", "apis/batch/v1"):
        assert paths[key]["serverRelativeURL"].startswith(f"/openapi/v3/{key}")


def test_v3_builtin_document_carries_schemas_and_field_validation(cluster):
    document = _document(cluster, "apis/apps/v1")
    assert document["openapi"].startswith("3.")
    schemas = document["components"]["schemas"]
    deployment = schemas["io.k8s.api.apps.v1.Deployment"]
    assert {"group": "apps", "version": "v1", "kind": "Deployment"} in deployment[
        "x-kubernetes-group-version-kind"
    ]
    spec = schemas["io.k8s.api.apps.v1.DeploymentSpec"]
    assert spec["properties"]["replicas"]["type"] == "integer"
    assert set(spec["required"]) >= {"selector", "template"}
    patch = _patch_operation(document, {"group": "apps", "version": "v1", "kind": "Deployment"})
    assert "fieldValidation" in [p.get("name") for p in patch["parameters"]]


def test_v3_crd_document_is_built_from_its_schema(cluster, gadget_crd):
    key = f"apis/{GROUP}/v1"
    cluster.wait_for(lambda: key in _index(cluster), what="the CRD's OpenAPI document")
    document = _document(cluster, key)
    name = f"io.trainscaler.contract.v1.{gadget_crd.kind}"
    schema = document["components"]["schemas"][name]
    gvk = {"group": GROUP, "version": "v1", "kind": gadget_crd.kind}
    assert schema["x-kubernetes-group-version-kind"] == [gvk]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["size", "maxSize"]
    assert spec["properties"]["colour"]["enum"] == ["red", "green"]
    metadata_ref = schema["properties"]["metadata"]["allOf"][0]["$ref"]
    assert metadata_ref.endswith("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in document["components"]["schemas"]
    patch = _patch_operation(document, gvk)
    assert "fieldValidation" in [p.get("name") for p in patch["parameters"]]


def test_v2_is_served_as_json(cluster):
    response = raw_request(cluster.api, "GET", "/openapi/v2")
    assert response.status == 200
    assert response.body["swagger"] == "2.0"
    pod = response.body["definitions"]["io.k8s.api.core.v1.Pod"]
    assert {"group": "", "version": "v1", "kind": "Pod"} in pod["x-kubernetes-group-version-kind"]
