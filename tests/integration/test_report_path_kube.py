"""A report's Kubernetes requests: one read of current state per scale.

A real Celery worker (``TRAINSCALER_SCALER=kubernetes``, no cluster cache)
decides epoch reports for ElasticJobs of a per-report policy (KubeML's
``throughput``) and scales them on the loopback API server, which counts
every request it serves. The ElasticJob ``schedule`` reads to learn which
policy drives the job is the copy the scale applies with
(``ScaleCommand.observed``): the scaler reads only the target's ``/scale``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_core.models import EpochReport
from tests.integration.conftest import Procs, wait_for
from tests.integration.test_kube_adapter import NS
from tests.integration.throughput_jobs import create_throughput_jobs, loopback_apiserver
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes.client import KubeClient
from workers.adapters.kubernetes.kinds import ELASTICJOBS
from workers.adapters.state_store import StateStore

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[LoopbackApiServer, Path]]:
    with loopback_apiserver(tmp_path / "kubeconfig") as served:
        yield served


def _replicas(kube: KubeClient, name: str) -> int:
    return int(
        kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["spec"]["replicas"]
    )


def test_a_report_that_scales_a_job_reads_its_current_state_once(
    apiserver, procs: Procs, client_app, store: StateStore
) -> None:
    server, kubeconfig = apiserver
    kube = KubeClient(server.api_client())
    create_throughput_jobs(kube, ("warm", "trainer"))
    procs.worker(
        "k",
        extra_env={
            "TRAINSCALER_SCALER": "kubernetes",
            "TRAINSCALER_KUBECONFIG": str(kubeconfig),
            "TRAINSCALER_NAMESPACES": NS,
            "TRAINSCALER_FAULT_INJECTION": "false",
        },
    )

    def report(name: str, replicas: int) -> None:
        # KubeML first contact: the throughput policy takes the reported parallelism.
        payload = EpochReport(job=f"{NS}/{name}", replicas=replicas, epoch=0)
        client_app.send_task("trainscaler.report_epoch", args=[payload.model_dump(mode="json")])

    def applied(name: str, replicas: int) -> bool:
        # Recorded in Redis once the scaler call (status write included) returned:
        # waiting here sends the API server nothing.
        record = store.applied(f"{NS}/{name}")
        return record is not None and record.target == replicas

    # Warm: the worker's connections and API discovery (the kinds it resolves, once).
    report("warm", 2)
    wait_for(lambda: applied("warm", 2), timeout=60, what="warm-up job scaled to 2")

    server.reset_request_counts()
    report("trainer", 3)
    wait_for(lambda: applied("trainer", 3), timeout=60, what="trainer scaled to 3")
    counts = server.request_counts()
    assert _replicas(kube, "trainer") == 3
    status = kube.request("GET", ELASTICJOBS.object_path(NS, "trainer"))["status"]
    assert status["currentReplicas"] == 3
    # The job read once, by the decision (which policy drives it: no listing of every
    # ElasticJob and every Deployment), and handed to the scale; one read of the
    # target's Scale, whose resourceVersion guards the write; the write, one Event,
    # the status. Before: LIST elasticjobs, LIST deployments, GET elasticjob again.
    assert counts == {
        ("get", "elasticjobs"): 1,
        ("get", "deployments/scale"): 1,
        ("update", "deployments/scale"): 1,
        ("create", "events"): 1,
        ("update", "elasticjobs/status"): 1,
    }
