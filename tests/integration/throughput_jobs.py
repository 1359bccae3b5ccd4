"""Throughput-policy ElasticJobs on a loopback API server: the fixture the
per-report Kubernetes tests share (report path, metrics, kill -9 of a scaler).

Each job is a one-replica Deployment and an ElasticJob with ``policy:
throughput`` (KubeML's per-report decisions: each report is decided in
``schedule`` and each change is a scale), bounds 0..50, in namespace ``NS``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.test_kube_adapter import NS, create_elastic_job, create_workload
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes import install_crd
from workers.adapters.kubernetes.client import KubeClient


@contextmanager
def loopback_apiserver(
    kubeconfig: Path, *, simulate_cluster: bool = False
) -> Iterator[tuple[LoopbackApiServer, Path]]:
    """A started server with the CRD installed, and its kubeconfig at ``kubeconfig``.

    ``simulate_cluster`` adds the simulated controllers, the scheduler and one
    8-GPU node, so the Deployments get running pods.
    """
    api = LoopbackApiServer(
        host="127.0.0.1", port=0, controllers=simulate_cluster, scheduler=simulate_cluster
    )
    api.start()
    try:
        if simulate_cluster:
            api.add_node("node-a", cpu="64", memory="256Gi", gpus=8)
        install_crd(api.api_client())
        yield api, api.write_kubeconfig(kubeconfig)
    finally:
        api.stop()


def create_throughput_jobs(kube: KubeClient, names: Iterable[str]) -> list[str]:
    """The namespace, then each name's Deployment and throughput ElasticJob."""
    kube.request(
        "POST", "/api/v1/namespaces",
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )  # fmt: skip
    created = []
    for name in names:
        create_workload(kube, "Deployment", name, replicas=1)
        create_elastic_job(kube, name, min_replicas=0, max_replicas=50, policy="throughput")
        created.append(name)
    return created
