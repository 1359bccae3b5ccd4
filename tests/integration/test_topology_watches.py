"""Watch streams and LISTs at the API server do not grow with scale-worker processes.

The same run twice, side by side, on fresh servers: one ``trainscaler planner``
(the only process with informers), beat, and 1 or 3 scale-worker processes
(``-Q cluster-writes``); EDL grows every ElasticJob to its maximum. The
server's traffic counters (``trainscaler_sim/apiserver/traffic.py``) count WATCH and LIST
requests: they must be the same in both runs, and exactly the planner's
informers. The scale writes go through ``/scale`` with the planner's copy of
the ElasticJob, so scale workers read no ElasticJob and list nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import BASE_ENV, Procs, wait_for
from tests.integration.test_kube_adapter import NS, create_elastic_job, create_workload
from tests.integration.test_planner_election import PLANNER_ENV, Planner
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes import install_crd
from workers.adapters.kubernetes.client import KubeClient

pytestmark = pytest.mark.timeout(300)

JOBS = 6
MAX_REPLICAS = 3
# The planner's informers: nodes, live pods, ElasticJobs and the four target kinds.
PLANNER_INFORMERS = 7


def _replicas(kube: KubeClient, name: str) -> int:
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"
    return int(kube.request("GET", path)["spec"]["replicas"])


def _run(scale_workers: int, *, redis_url: str, tmp_path: Path) -> dict[tuple[str, str], int]:
    """One run on a fresh loopback server; the server's request counts by (verb, resource)."""
    server = LoopbackApiServer(host="127.0.0.1", port=0, controllers=True, scheduler=True)
    server.start()
    logs = tmp_path / f"run-{scale_workers}"
    logs.mkdir()
    procs = Procs(env={}, logs=logs)
    planner: Planner | None = None
    try:
        server.add_node("node-a", cpu="64", memory="256Gi", gpus=0)
        install_crd(server.api_client())
        kube = KubeClient(server.api_client())
        kube.request(
            "POST", "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )  # fmt: skip
        names = [f"job{i}" for i in range(JOBS)]
        for name in names:
            create_workload(kube, "Deployment", name, replicas=1)
            create_elastic_job(kube, name, max_replicas=MAX_REPLICAS)
        server.reset_request_counts()
        env = {
            **BASE_ENV,
            **PLANNER_ENV,
            "TRAINSCALER_REDIS_URL": redis_url,
            "TRAINSCALER_KUBECONFIG": str(server.write_kubeconfig(logs / "kubeconfig")),
            "TRAINSCALER_KUBE_QPS": "1000",
            "TRAINSCALER_KUBE_BURST": "1000",
        }
        procs.env = env
        for index in range(scale_workers):
            procs.worker(f"scale{index}", queues="cluster-writes")
        planner = Planner("planner", env, logs)
        procs.beat("beat")
        wait_for(
            lambda: all(_replicas(kube, n) == MAX_REPLICAS for n in names),
            timeout=120,
            interval=0.2,
            what=f"every job at {MAX_REPLICAS} replicas",
        )
        return server.request_counts()
    finally:
        if planner is not None:
            planner.stop()
        procs.stop_all()
        server.stop()


def _by_verb(counts: dict[tuple[str, str], int], verb: str) -> Counter[str]:
    return Counter({resource: n for (v, resource), n in counts.items() if v == verb})


def test_watches_and_lists_do_not_grow_with_scale_workers(
    redis_url: str, redis_client: Any, tmp_path: Path
) -> None:
    one = _run(1, redis_url=redis_url, tmp_path=tmp_path)
    redis_client.flushall()
    three = _run(3, redis_url=redis_url, tmp_path=tmp_path)
    for label, counts in (("1 scale worker", one), ("3 scale workers", three)):
        print(
            f"{label}: watches {dict(_by_verb(counts, 'watch'))}, lists {dict(_by_verb(counts, 'list'))}, "
            f"scale writes {counts.get(('update', 'deployments/scale'), 0)}, "
            f"ElasticJob GETs {counts.get(('get', 'elasticjobs'), 0)}"
        )
    # One watch per planner informer, whatever the number of scale workers.
    assert sum(_by_verb(one, "watch").values()) == PLANNER_INFORMERS
    assert _by_verb(three, "watch") == _by_verb(one, "watch")
    # LISTs: the planner's initial ones only (one per informer; nothing re-lists).
    assert _by_verb(three, "list") == _by_verb(one, "list")
    assert sum(_by_verb(one, "list").values()) == PLANNER_INFORMERS
    # Every job was scaled through /scale in both runs.
    for counts in (one, three):
        assert counts.get(("update", "deployments/scale"), 0) >= JOBS
