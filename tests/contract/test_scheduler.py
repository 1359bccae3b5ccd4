"""Simulated scheduler: binding, Unschedulable with the upstream message shape,
best fit, and retries when capacity appears (pod deleted, node added)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from trainscaler_sim.apiserver import LoopbackApiServer

from .conftest import Cluster, deployment_manifest, pod_manifest


def _condition(pod, kind):
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def test_schedulable_pod_is_bound(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_manifest("fits", requests={"cpu": "100m"}))
    pod = cluster.wait_for(
        lambda: (p := core.read_namespaced_pod("fits", namespace)).spec.node_name and p,
        what="the pod to be bound",
    )
    scheduled = _condition(pod, "PodScheduled")
    assert scheduled is not None and scheduled.status == "True"


def test_unfit_pod_is_unschedulable(cluster, core, namespace):
    core.create_namespaced_pod(
        namespace, pod_manifest("huge", requests={"example.com/unobtainium": "1"})
    )
    condition = cluster.wait_for(
        lambda: _condition(core.read_namespaced_pod("huge", namespace), "PodScheduled"),
        what="a PodScheduled condition",
    )
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert condition.message.startswith("0/")
    assert "Insufficient example.com/unobtainium" in condition.message
    pod = core.read_namespaced_pod("huge", namespace)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None


@pytest.fixture
def small_cluster(loopback: LoopbackApiServer, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A private loopback server with two 8-CPU/32Gi/4-GPU nodes (not shared);
    indirect parametrization with True also runs the controllers."""
    controllers = bool(getattr(request, "param", False))
    server = LoopbackApiServer(port=0, controllers=controllers, scheduler=True)
    server.start()
    server.add_node("node-a")
    server.add_node("node-b")
    api = server.api_client()
    namespace = client.V1Namespace(metadata=client.V1ObjectMeta(name="sched"))
    client.CoreV1Api(api).create_namespace(namespace)
    try:
        yield Cluster(api=api, server=server, wait_seconds=10.0)
    finally:
        server.stop()


def _place(cluster, core, *, name, gpus, cpu="1"):
    core.create_namespaced_pod(
        "sched", pod_manifest(name, requests={"cpu": cpu, "nvidia.com/gpu": str(gpus)})
    )

    def settled():
        pod = core.read_namespaced_pod(name, "sched")
        return pod if pod.spec.node_name or _condition(pod, "PodScheduled") else None

    return cluster.wait_for(settled, what=f"{name} to be scheduled or rejected")


def test_best_fit_is_deterministic(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    assert _place(small_cluster, core, name="first", gpus=1).spec.node_name == "node-a"
    assert _place(small_cluster, core, name="second", gpus=3).spec.node_name == "node-a"
    assert _place(small_cluster, core, name="third", gpus=2).spec.node_name == "node-b"
    assert _place(small_cluster, core, name="fourth", gpus=1).spec.node_name == "node-b"


def test_unschedulable_message_counts_nodes(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    pod = _place(small_cluster, core, name="greedy", gpus=5)
    condition = _condition(pod, "PodScheduled")
    assert condition.reason == "Unschedulable"
    assert condition.message.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    cpu_pod = _place(small_cluster, core, name="cpu-hog", gpus=0, cpu="9")
    assert "2 Insufficient cpu" in _condition(cpu_pod, "PodScheduled").message


def test_pending_pod_binds_when_capacity_frees(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    _place(small_cluster, core, name="one", gpus=3)
    _place(small_cluster, core, name="two", gpus=3)
    waiting = _place(small_cluster, core, name="three", gpus=3)
    assert waiting.spec.node_name is None
    core.delete_namespaced_pod("one", "sched")
    bound = small_cluster.wait_for(
        lambda: core.read_namespaced_pod("three", "sched").spec.node_name, what="three to bind"
    )
    assert bound == "node-a"
    running = core.read_namespaced_pod("three", "sched")
    assert running.status.phase == "Running"
    assert _condition(running, "Ready").status == "True"
    assert running.status.container_statuses[0].ready is True


def test_pending_pod_binds_when_a_node_joins(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    pod = _place(small_cluster, core, name="big", gpus=8, cpu="2")
    assert pod.spec.node_name is None
    small_cluster.server.add_node("node-c", gpus=8)
    assert (
        small_cluster.wait_for(
            lambda: core.read_namespaced_pod("big", "sched").spec.node_name, what="big to bind"
        )
        == "node-c"
    )


def test_cordoned_node_is_skipped(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    core.patch_node("node-a", {"spec": {"unschedulable": True}})
    small_cluster.server.wait_idle(5)
    assert _place(small_cluster, core, name="elsewhere", gpus=1).spec.node_name == "node-b"


@pytest.mark.parametrize("small_cluster", [True], indirect=True)
def test_scale_down_removes_pending_then_newest_pods(small_cluster):
    core: Any = client.CoreV1Api(small_cluster.api)
    apps: Any = client.AppsV1Api(small_cluster.api)
    manifest = deployment_manifest("gpu", replicas=3, requests={"cpu": "1", "nvidia.com/gpu": "3"})
    apps.create_namespaced_deployment("sched", manifest)

    def pods():
        return core.list_namespaced_pod("sched", label_selector="app=gpu").items

    def placed():
        found = pods()
        running = [p for p in found if p.spec.node_name]
        waiting = [p for p in found if _condition(p, "PodScheduled") and not p.spec.node_name]
        return (running, waiting) if len(running) == 2 and len(waiting) == 1 else None

    running, _ = small_cluster.wait_for(placed, what="2 running pods and 1 unschedulable")
    apps.patch_namespaced_deployment_scale("gpu", "sched", {"spec": {"replicas": 2}})
    small_cluster.wait_for(
        lambda: sorted(p.metadata.name for p in pods()) == sorted(p.metadata.name for p in running),
        what="the unschedulable pod to be the one removed",
    )
    order = {
        p.metadata.name: small_cluster.server.store.creation_order(
            "pods", ("sched", p.metadata.name)
        )
        for p in running
    }
    newest_name = max(order, key=order.__getitem__)
    apps.patch_namespaced_deployment_scale("gpu", "sched", {"spec": {"replicas": 1}})
    small_cluster.wait_for(
        lambda: [p.metadata.name for p in pods()] == [n for n in order if n != newest_name],
        what="the newest running pod to be removed",
    )


SPREADING_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: spreading
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
        resources:
        - {name: nvidia.com/gpu, weight: 1}
"""


def test_scheduler_profiles_score_as_configured(loopback, tmp_path):
    """The shipped packing profile fills the fullest node; a LeastAllocated
    profile spreads; a pod naming a scheduler nobody runs stays unbound.
    (Loopback only: a private server configured with the profiles.)"""
    from trainscaler_sim.apiserver.controllers.scoring import profiles_from_config

    config = tmp_path / "spreading.yaml"
    config.write_text(SPREADING_CONFIG)
    packing = Path(__file__).resolve().parents[2] / "deploy/scheduler/kube-scheduler-config.yaml"
    profiles = {**profiles_from_config(packing), **profiles_from_config(config)}
    server = LoopbackApiServer(
        port=0, controllers=False, scheduler=True, scheduler_profiles=profiles
    )
    server.start()
    try:
        for name in ("node-a", "node-b", "node-c"):
            server.add_node(name)
        api = server.api_client()
        core: Any = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="sched")))

        def place(name: str, scheduler: str) -> str | None:
            manifest = pod_manifest(name, requests={"cpu": "1", "nvidia.com/gpu": "1"})
            manifest["spec"]["schedulerName"] = scheduler
            core.create_namespaced_pod("sched", manifest)
            server.wait_idle(10)
            node: str | None = core.read_namespaced_pod(name, "sched").spec.node_name
            return node

        # Spreading: each pod to the least allocated node (ties by name).
        assert [place(f"s{i}", "spreading") for i in range(3)] == ["node-a", "node-b", "node-c"]
        # Round robin while they tie: node-a ends with 3 GPUs used, b and c with 2.
        assert place("s3", "spreading") == "node-a"
        assert place("s4", "spreading") == "node-b"
        assert place("s5", "spreading") == "node-c"
        assert place("s6", "spreading") == "node-a"
        # Packing (MostAllocated): the fullest node with a free GPU: node-a (3 of 4),
        # then, node-a full, node-b and node-c tie at 2 (by name).
        assert place("p0", "trainscaler-packing") == "node-a"
        assert place("p1", "trainscaler-packing") == "node-b"
        assert place("p2", "trainscaler-packing") == "node-b"
        assert place("nobody", "no-such-scheduler") is None
        api.close()
    finally:
        server.stop()
