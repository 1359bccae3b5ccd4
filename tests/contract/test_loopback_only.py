"""Loopback-only conveniences: request counting, deterministic fault injection,
discovery, kubeconfig and the command-line entry; plus a behaviour-based check
that GET latency does not grow with the number of stored objects."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from kubernetes import client, config, watch

from trainscaler_sim.apiserver import LoopbackApiServer

from .conftest import deployment_manifest


def test_request_counts_by_verb_and_resource(loopback, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("counted", replicas=0))
    loopback.reset_request_counts()
    apps.read_namespaced_deployment("counted", namespace)
    apps.list_namespaced_deployment(namespace)
    apps.patch_namespaced_deployment_scale("counted", namespace, {"spec": {"replicas": 1}})
    apps.patch_namespaced_deployment_scale("counted", namespace, {"spec": {"replicas": 0}})
    apps.read_namespaced_deployment_scale("counted", namespace)
    apps.patch_namespaced_deployment_status("counted", namespace, {"status": {}})
    core.create_namespaced_event(
        namespace, {"metadata": {"name": "e"}, "involvedObject": {"name": "x"}}
    )
    assert loopback.request_counts() == {
        ("get", "deployments"): 1,
        ("list", "deployments"): 1,
        ("patch", "deployments/scale"): 2,
        ("get", "deployments/scale"): 1,
        ("patch", "deployments/status"): 1,
        ("create", "events"): 1,
    }


def _outcomes(loopback, core, *, namespace, count):
    results = []
    for index in range(count):
        try:
            core.patch_namespaced_config_map("target", namespace, {"data": {"i": str(index)}})
            results.append(200)
        except client.ApiException as error:
            body = json.loads(str(error.body))
            assert body["kind"] == "Status" and body["code"] == error.status
            results.append(error.status)
    return results


def test_fault_injection_is_deterministic_and_clearable(loopback, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "target"}})
    loopback.inject_faults(verb="patch", rate=0.5, codes=(409, 500), seed=7, resource="configmaps")
    first = _outcomes(loopback, core, namespace=namespace, count=40)
    loopback.inject_faults(verb="patch", rate=0.5, codes=(409, 500), seed=7, resource="configmaps")
    second = _outcomes(loopback, core, namespace=namespace, count=40)
    assert first == second
    assert {409, 500, 200} == set(first)
    assert 8 <= first.count(200) <= 32
    core.read_namespaced_config_map("target", namespace)  # other verbs are untouched
    loopback.inject_faults(rate=0)
    assert _outcomes(loopback, core, namespace=namespace, count=10) == [200] * 10


def test_faulted_requests_change_nothing(loopback, core, namespace):
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "target"}, "data": {"v": "0"}}
    )
    loopback.inject_faults(verb="patch", rate=1.0, codes=(503,), seed=0)
    try:
        with pytest.raises(client.ApiException) as caught:
            core.patch_namespaced_config_map("target", namespace, {"data": {"v": "1"}})
        assert caught.value.status == 503
        headers: Any = caught.value.headers
        assert headers.get("Retry-After") == "1"
    finally:
        loopback.inject_faults(rate=0)
    assert core.read_namespaced_config_map("target", namespace).data == {"v": "0"}


def test_discovery_lists_served_resources(loopback, cluster):
    groups = {group.name for group in client.ApisApi(cluster.api).get_api_versions().groups}
    assert {"apps", "batch", "apiextensions.k8s.io", "events.k8s.io"} <= groups
    resources = client.AppsV1Api(cluster.api).get_api_resources().resources
    names = {resource.name for resource in resources}
    assert {"deployments", "deployments/scale", "statefulsets/status", "replicasets/scale"} <= names
    core_names = {r.name for r in client.CoreV1Api(cluster.api).get_api_resources().resources}
    assert {"pods", "pods/status", "nodes", "namespaces", "events"} <= core_names
    assert client.VersionApi(cluster.api).get_code().major == "1"


def test_kubeconfig_points_at_the_server(loopback, tmp_path):
    path = loopback.write_kubeconfig(tmp_path / "kubeconfig")
    api = config.new_client_from_config(config_file=str(path))
    assert len(client.CoreV1Api(api).list_node().items) >= 1


def test_command_line_entry_serves_nodes(loopback, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainscaler_sim.apiserver",
            "--port",
            "0",
            "--nodes",
            "2",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line: list[str] = []
        output: Any = process.stdout
        reader = threading.Thread(target=lambda: line.append(output.readline()), daemon=True)
        reader.start()
        reader.join(timeout=30)
        assert line and line[0].startswith("http://127.0.0.1:")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core: Any = client.CoreV1Api(api)
        nodes = core.list_node().items
        assert sorted(node.metadata.name for node in nodes) == ["node-0", "node-1"]
        assert nodes[0].status.allocatable["nvidia.com/gpu"] == "4"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _median_get_seconds(core, namespace, *, name, samples=40):
    durations = []
    for _ in range(samples):
        started = time.perf_counter()
        core.read_namespaced_config_map(name, namespace)
        durations.append(time.perf_counter() - started)
    return statistics.median(durations)


def test_get_latency_does_not_grow_with_object_count(loopback):
    """Behavioural O(1) check: 5,000 stored objects, GET stays within a loose
    factor of GET with 10. bench/apiserver.py reports the precise ratio."""
    with LoopbackApiServer(port=0, controllers=False, scheduler=False) as server:
        core: Any = client.CoreV1Api(server.api_client())
        core.create_namespace({"metadata": {"name": "bench"}})
        configmaps = server.operations.resource("", "v1", plural="configmaps")
        for index in range(10):
            server.operations.create_stored(
                configmaps, {"metadata": {"name": f"cm-{index}"}}, namespace="bench"
            )
        small = _median_get_seconds(core, "bench", name="cm-5")
        for index in range(10, 5000):
            server.operations.create_stored(
                configmaps, {"metadata": {"name": f"cm-{index}"}}, namespace="bench"
            )
        large = _median_get_seconds(core, "bench", name="cm-5")
        page = core.list_namespaced_config_map("bench", limit=10)
        assert len(page.items) == 10 and page.metadata.remaining_item_count == 4990
        assert large < small * 10 + 0.005


def test_stop_ends_open_watches_and_connections(loopback):
    before = set(threading.enumerate())
    server = LoopbackApiServer(port=0, controllers=True, scheduler=True)
    server.start()
    core: Any = client.CoreV1Api(server.api_client())
    finished = threading.Event()

    def watch_forever():
        try:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "default", timeout_seconds=600
            ):
                pass
        except Exception:  # the connection is cut by stop(); any ending is fine here
            pass
        finished.set()

    watcher = threading.Thread(target=watch_forever, daemon=True)
    watcher.start()
    core.list_namespace()
    time.sleep(0.2)  # bounded: lets the watch request reach the server
    started = time.monotonic()
    server.stop()
    assert finished.wait(timeout=10), "the watch did not end when the server stopped"
    assert time.monotonic() - started < 10
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=5)
        assert not thread.is_alive(), f"{thread.name} outlived stop()"


def test_bounded_history_expires_old_versions(loopback):
    with LoopbackApiServer(port=0, controllers=False, scheduler=False, history_limit=5) as server:
        core: Any = client.CoreV1Api(server.api_client())
        start = core.list_namespaced_config_map("default").metadata.resource_version
        for index in range(3):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"a{index}"}})
        replayed = []
        watcher = watch.Watch()
        for event in watcher.stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=10
        ):
            replayed.append(event)
            if len(replayed) == 3:
                watcher.stop()
        assert [event["object"].metadata.name for event in replayed] == ["a0", "a1", "a2"]
        for index in range(5):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"b{index}"}})
        with pytest.raises(client.ApiException) as caught:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=start,
                    timeout_seconds=1,
                )
            )
        assert caught.value.status == 410


def test_dry_run_is_refused_not_persisted(loopback, core, namespace):
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    assert caught.value.status == 400
    assert "dry" not in {
        item.metadata.name for item in core.list_namespaced_config_map(namespace).items
    }


def test_wait_idle_means_controllers_caught_up(loopback, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("idle", replicas=3))
    assert loopback.wait_idle(timeout=10)
    pods = core.list_namespaced_pod(namespace, label_selector="app=idle").items
    assert sorted(pod.status.phase for pod in pods) == ["Running"] * 3
    assert apps.read_namespaced_deployment("idle", namespace).status.ready_replicas == 3
