"""A CRD with a real structural schema, and raw requests that see headers and Tables.

``gadget_crd`` installs ``gadgets<suffix>.contract.trainscaler.io`` (unique per
test, removed afterwards) whose schema exercises what kube-apiserver checks:
required fields, types, minimum, pattern, enum, a ``set`` list, a defaulted
nested object, a ``x-kubernetes-preserve-unknown-fields`` subtree and CEL rules
(a cross-field rule and an ``oldSelf`` transition rule), plus printer columns.
``raw_request`` goes through the ApiClient's own auth, so it works against a
real cluster as well.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client

GROUP = "contract.trainscaler.io"
TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
GADGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size", "maxSize"],
            "x-kubernetes-validations": [
                {"rule": "self.size <= self.maxSize", "message": "size must not exceed maxSize"},
                {
                    "rule": "!has(oldSelf.colour) || self.colour == oldSelf.colour",
                    "message": "colour is immutable",
                },
            ],
            "properties": {
                "size": {"type": "integer", "minimum": 0},
                "maxSize": {"type": "integer", "minimum": 0},
                "colour": {"type": "string", "enum": ["red", "green"]},
                "code": {"type": "string", "pattern": "^[a-z]+$"},
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "tuning": {
                    "type": "object",
                    "default": {},
                    "properties": {"mode": {"type": "string", "default": "auto"}},
                },
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}
GADGET_COLUMNS: list[dict[str, Any]] = [
    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
    {"name": "Colour", "type": "string", "jsonPath": ".spec.colour"},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.tuning.mode", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


@dataclass(frozen=True)
class Gadgets:
    plural: str
    kind: str

    def manifest(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/v1",
            "kind": self.kind,
            "metadata": {"name": name},
            "spec": spec,
        }


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: Any


def raw_request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    accept: str = "application/json",
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> RawResponse:
    """One request with the client's auth; never raises for an HTTP error code."""
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized)
    data = response.read()
    headers = {key.lower(): value for key, value in response.headers.items()}
    return RawResponse(response.status, headers, _decoded(data))


def _decoded(data: bytes) -> Any:
    """The JSON body, or None: kube-apiserver answers a path no group serves yet
    with a plain-text 404 ("404 page not found"), not a Status."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _install(
    cluster: Any, *, columns: list[dict[str, Any]] | None, schema: dict[str, Any]
) -> Iterator[Gadgets]:
    extensions = client.ApiextensionsV1Api(cluster.api)
    suffix = "".join(random.choice(string.ascii_lowercase) for _ in range(8))
    plural, kind = f"gadgets{suffix}", f"Gadget{suffix.capitalize()}"
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
    }
    if columns is not None:
        version["additionalPrinterColumns"] = columns
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": f"gadget{suffix}", "kind": kind},
            "versions": [version],
        },
    }
    extensions.create_custom_resource_definition(cast(Any, body))

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
        conditions = crd.status.conditions if crd.status is not None else None
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    cluster.wait_for(established, what="the CRD to be established")
    try:
        yield Gadgets(plural, kind)
    finally:
        extensions.delete_custom_resource_definition(f"{plural}.{GROUP}")


@pytest.fixture
def gadget_crd(cluster: Any) -> Iterator[Gadgets]:
    yield from _install(cluster, columns=GADGET_COLUMNS, schema=GADGET_SCHEMA)


@pytest.fixture
def plain_crd(cluster: Any) -> Iterator[Gadgets]:
    """No printer columns and a schema that keeps every field."""
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    yield from _install(cluster, columns=None, schema=schema)


def create_gadget(
    cluster: Any,
    namespace: str,
    gadgets: Gadgets,
    name: str,
    spec: dict[str, Any],
    *,
    field_validation: str | None = None,
) -> RawResponse:
    """POST a gadget, retrying the 404 a real server answers until it serves the new CRD."""
    path = f"/apis/{GROUP}/v1/namespaces/{namespace}/{gadgets.plural}"
    query = [("fieldValidation", field_validation)] if field_validation else []

    def attempt() -> RawResponse | None:
        response = raw_request(
            cluster.api, "POST", path, query=query, body=gadgets.manifest(name, spec)
        )
        return None if response.status == 404 else response

    return cast(RawResponse, cluster.wait_for(attempt, what="the custom resource to be served"))
