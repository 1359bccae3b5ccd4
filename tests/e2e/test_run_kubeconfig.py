"""``trainscaler run --cluster kubeconfig``: the cluster the kubeconfig names, nothing simulated.

The "real" cluster here is a loopback API server this test starts in its own
process (4 nodes x 4 GPUs) and describes with a kubeconfig; ``run`` must use
it through ``TRAINSCALER_KUBECONFIG``, start no API server of its own, install
the CRD there and scale the jobs it submits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from trainscaler_sim.apiserver import LoopbackApiServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_run_against_the_kubeconfig_cluster(embedded_run, tmp_path: Path) -> None:
    with LoopbackApiServer(port=0) as server:
        for index in range(4):
            server.add_node(f"node-{index}", cpu="8", memory="32Gi", gpus=4)
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        run = embedded_run(
            duration=30,
            # No traces there: the jobs run on the built-in synthetic curves.
            extra=["--cluster", "kubeconfig", "--data-dir", str(tmp_path / "no-data")],
            env={"TRAINSCALER_KUBECONFIG": str(kubeconfig)},
        )
        run.wait_line(r"^starting trainscaler \(kubeconfig cluster\)", timeout=30)
        code = run.wait_exit(timeout=100)
        assert code == 0, run.output()[-4000:]
        summary = run.summary()
        assert "apiserver" not in summary["children"]
        assert summary["dead_letters"] == 0, summary
        assert {j["curve"] for j in summary["jobs"].values()} == {"synthetic"}
        elastic = [j for j in summary["jobs"].values() if j["kind"] == "elasticjob"]
        assert elastic and all(j["scale_events"] >= 1 for j in elastic), summary["jobs"]
        # The jobs ran on this cluster: its Deployments were scaled past their first count.
        apps = client.AppsV1Api(server.api_client())
        replicas = {
            d.metadata.name: d.spec.replicas
            for d in apps.list_namespaced_deployment("default").items
            if d.metadata is not None and d.spec is not None
        }
        assert (replicas.get("cifar10-ej") or 0) > 1, replicas  # submitted at 1, grown by EDL
        assert run.leftovers_after() == []
