"""trainscaler_sim.nodeagent against the loopback API server without its scheduler (issue 17):
nodes registered with their capacity and Ready, leases renewed, a bound pod
marked Running and Ready, a pod on another node left alone. (The agent's final
DELETE of a gracefully deleted pod runs on the real cluster only: the loopback
server ends a pod's grace period at once.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client

from tests.integration.conftest import wait_for
from trainscaler_sim.apiserver import LoopbackApiServer
from trainscaler_sim.nodeagent import NodeAgent, NodeShape

T = TypeVar("T")


@pytest.fixture
def agent_cluster() -> Iterator[tuple[Any, NodeAgent]]:
    with LoopbackApiServer(port=0, controllers=False, scheduler=False) as server:
        api = server.api_client()
        agent = NodeAgent(
            api, ["gpu-0", "gpu-1"], shape=NodeShape(cpu="4", memory="8Gi", gpus=2),
            heartbeat_seconds=0.1,
        )  # fmt: skip
        agent.start()
        try:
            yield client.CoreV1Api(api), agent
        finally:
            agent.stop()


def test_nodes_register_ready_with_gpus_and_leases(agent_cluster):
    core, _ = agent_cluster
    nodes = {node.metadata.name: node for node in core.list_node().items}
    assert sorted(nodes) == ["gpu-0", "gpu-1"]
    for node in nodes.values():
        assert node.status.allocatable["nvidia.com/gpu"] == "2"
        assert node.status.capacity["cpu"] == "4"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]
    leases: Any = client.CoordinationV1Api(core.api_client)
    first = leases.read_namespaced_lease("gpu-0", "kube-node-lease").spec.renew_time
    wait_for(
        lambda: leases.read_namespaced_lease("gpu-0", "kube-node-lease").spec.renew_time != first,
        what="the lease renewed",
        timeout=10.0,
    )


def _pod(name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "trainer:1"}],
        "terminationGracePeriodSeconds": 30,
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_bound_pod_runs_and_others_are_left_alone(agent_cluster):
    core, _ = agent_cluster
    core.create_namespaced_pod("default", _pod("bound", "gpu-1"))
    core.create_namespaced_pod("default", _pod("elsewhere", "not-ours"))
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("bound", "default")).status.phase == "Running" and p,
        what="the bound pod Running",
        timeout=10.0,
    )
    ready = {c.type: c.status for c in pod.status.conditions}
    assert ready["Ready"] == ready["ContainersReady"] == "True"
    assert pod.status.container_statuses[0].ready is True
    assert pod.status.host_ip == "10.250.0.2" and pod.status.pod_ip
    assert core.read_namespaced_pod("elsewhere", "default").status.phase == "Pending"
