"""Fixtures for the Kubernetes API contract suite.

By default every test runs against a ``LoopbackApiServer`` (4 nodes x 8 CPU,
32Gi, 4 GPUs). With ``--real-cluster`` and ``KUBECONFIG`` set, the same tests
run against that cluster instead; tests needing the loopback server's
internals ask for the ``loopback`` fixture and are skipped there. Each test
works in its own namespace.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from trainscaler_sim.apiserver import LoopbackApiServer

T = TypeVar("T")
NODE_COUNT = 4
# kube-controller-manager's root-ca-cert-publisher puts this ConfigMap in every namespace.
ROOT_CA = "kube-root-ca.crt"


def pytest_addoption(parser: pytest.Parser) -> None:
    # pytest only asks conftests of the rootdir/initial paths for options, so
    # tests/conftest.py may register this too; tolerate either order.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--real-cluster",
            action="store_true",
            default=False,
            help="run tests/contract against the cluster in KUBECONFIG, not the loopback server",
        )


@dataclass
class Cluster:
    """What a test talks to: an ApiClient, plus the loopback server when there is one."""

    api: client.ApiClient
    server: LoopbackApiServer | None
    wait_seconds: float

    @property
    def real(self) -> bool:
        return self.server is None

    def wait_for(
        self, probe: Callable[[], T | None], *, what: str, timeout: float | None = None
    ) -> T:
        """Poll ``probe`` until it returns a truthy value; fail after the timeout."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.wait_seconds)
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}")
            time.sleep(0.02)


def _real_cluster_requested(config_: pytest.Config) -> bool:
    try:
        return bool(config_.getoption("--real-cluster"))
    except ValueError:
        return False


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if _real_cluster_requested(request.config):
        if not os.environ.get("KUBECONFIG"):
            pytest.skip("--real-cluster needs KUBECONFIG")
        config.load_kube_config()
        yield Cluster(api=client.ApiClient(), server=None, wait_seconds=180.0)
        return
    server = LoopbackApiServer(port=0)
    server.start()
    for index in range(NODE_COUNT):
        server.add_node(f"node-{index}", cpu="8", memory="32Gi", gpus=4)
    try:
        yield Cluster(api=server.api_client(), server=server, wait_seconds=10.0)
    finally:
        server.stop()


@pytest.fixture
def loopback(cluster: Cluster) -> LoopbackApiServer:
    """The loopback server; tests using it are skipped against a real cluster."""
    if cluster.server is None:
        pytest.skip("needs the loopback server's internals")
    return cluster.server


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api)


@pytest.fixture
def apps(cluster: Cluster) -> client.AppsV1Api:
    return client.AppsV1Api(cluster.api)


@pytest.fixture
def batch(cluster: Cluster) -> client.BatchV1Api:
    return client.BatchV1Api(cluster.api)


@pytest.fixture
def custom(cluster: Cluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api)


@pytest.fixture
def namespace(cluster: Cluster, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace, once its root CA ConfigMap is published (so lists are settled)."""
    name = f"contract-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    cluster.wait_for(
        lambda: any(
            (item.metadata and item.metadata.name) == ROOT_CA
            for item in core.list_namespaced_config_map(name).items
        ),
        what=f"{ROOT_CA} in {name}",
    )
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as error:
            if error.status != 404:
                raise


def pod_manifest(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    generate_name: str | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": labels or {}}
    if generate_name:
        metadata["generateName"] = generate_name
    else:
        metadata["name"] = name
    resources: dict[str, Any] = {}
    if requests:
        resources = {"requests": dict(requests), "limits": dict(requests)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.9", "resources": resources}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def deployment_manifest(
    name: str, *, replicas: int, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    pod = pod_manifest(name, labels={"app": name}, requests=requests)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def statefulset_manifest(name: str, *, replicas: int, parallel: bool = True) -> dict[str, Any]:
    pod = pod_manifest(name, labels={"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel" if parallel else "OrderedReady",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def replicaset_manifest(name: str, *, replicas: int) -> dict[str, Any]:
    manifest = deployment_manifest(name, replicas=replicas)
    manifest["kind"] = "ReplicaSet"
    del manifest["metadata"]["labels"]
    return manifest


def api_status(error: client.ApiException) -> tuple[int, str]:
    """(code, reason) of a Status body, checking that it is a proper Status."""
    import json

    body = json.loads(str(error.body))
    assert body["kind"] == "Status"
    assert body["code"] == error.status
    return error.status, body["reason"]
