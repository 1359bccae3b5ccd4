"""A stand-in for kubelets on a real control plane without container runtimes.

``scripts/real-k8s`` runs it next to kube-apiserver, kube-scheduler and
kube-controller-manager. It is an ordinary API client (its kubeconfig's
credentials): it registers fake nodes with CPU, memory and GPU capacity, renews
their leases in ``kube-node-lease`` like kubelets do (so the node lifecycle
controller keeps them Ready), marks the pods the scheduler binds to them
Running and Ready, and finishes the graceful deletion of pods on them (a
kubelet's final ``DELETE`` with grace period 0). It never runs a container.

Run: ``python -m trainscaler_sim.nodeagent --kubeconfig FILE --nodes 4``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config, watch

LOG = logging.getLogger("nodeagent")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
GPU = "nvidia.com/gpu"
Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeShape:
    """Capacity of every node the agent registers."""

    cpu: str = "8"
    memory: str = "32Gi"
    gpus: int = 4
    pods: int = 110


def node_manifest(name: str, shape: NodeShape, *, address: str, now: dt.datetime) -> dict[str, Any]:
    capacity = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
    if shape.gpus:
        capacity[GPU] = str(shape.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "nodeagent",
            },
        },
        "spec": {},
        "status": node_status(capacity, address=address, now=now),
    }


def node_status(capacity: dict[str, str], *, address: str, now: dt.datetime) -> dict[str, Any]:
    stamp = _stamp(now)

    def condition(kind: str, status: str, *, reason: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": reason,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            condition("MemoryPressure", "False", reason="KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", reason="KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", reason="KubeletHasSufficientPID"),
            condition("Ready", "True", reason="KubeletReady"),
        ],
        "addresses": [{"type": "InternalIP", "address": address}],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "v0.0.0-nodeagent",
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "nodeagent://0",
            "osImage": "nodeagent",
            "kernelVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def running_status(
    pod: dict[str, Any], *, host_ip: str, pod_ip: str, now: dt.datetime
) -> dict[str, Any]:
    """The status a kubelet reports once every container started and is ready."""
    stamp = _stamp(now)
    kinds = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        for kind in kinds
    ]
    containers = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        containers.append(
            {
                "name": container["name"],
                "image": container.get("image") or "",
                "imageID": "",
                "containerID": f"nodeagent://{pod['metadata']['uid']}-{container['name']}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": stamp}},
            }
        )
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": stamp,
        "containerStatuses": containers,
    }


class NodeAgent:
    """Registers ``names`` as nodes and plays their kubelets until ``stop()``."""

    def __init__(
        self,
        api: client.ApiClient,
        names: list[str],
        *,
        shape: NodeShape,
        heartbeat_seconds: float = 10.0,
        clock: Clock = utc_now,
    ) -> None:
        # Typed as Any: the client takes the JSON dicts the agent builds as they are.
        self._core: Any = client.CoreV1Api(api)
        self._coordination: Any = client.CoordinationV1Api(api)
        self._names = list(names)
        self._addresses = {name: f"10.250.0.{index + 1}" for index, name in enumerate(names)}
        self._shape = shape
        self._heartbeat_seconds = heartbeat_seconds
        self._clock = clock
        self._pod_ips = (f"10.244.{n // 250}.{n % 250 + 2}" for n in itertools.count())
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ nodes
    def register(self) -> None:
        for name in self._names:
            manifest = node_manifest(
                name, self._shape, address=self._addresses[name], now=self._clock()
            )
            try:
                self._core.create_node(manifest)
            except client.ApiException as error:
                if error.status != 409:
                    raise
            # Create may drop status; the kubelet posts it through /status as well.
            self._core.patch_node_status(name, {"status": manifest["status"]})
            self._renew_lease(name)

    def _renew_lease(self, name: str) -> None:
        now = _micro_stamp(self._clock())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now,
            },
        }
        try:
            self._coordination.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": body["spec"]})
        except client.ApiException as error:
            if error.status != 404:
                raise
            self._coordination.create_namespaced_lease(LEASE_NAMESPACE, body)

    def _heartbeat(self) -> None:
        rounds = 0
        while not self._stopping.wait(self._heartbeat_seconds):
            rounds += 1
            for name in self._names:
                try:
                    self._renew_lease(name)
                    if rounds % 6 == 0:  # kubelets post status about once a minute
                        self._post_ready(name)
                except Exception:
                    LOG.exception("heartbeat of %s failed", name)

    def _post_ready(self, name: str) -> None:
        node = _json(self._core.read_node_status(name, _preload_content=False))
        stamp = _stamp(self._clock())
        conditions = [
            {**condition, "lastHeartbeatTime": stamp}
            for condition in (node.get("status") or {}).get("conditions") or []
        ]
        self._core.patch_node_status(name, {"status": {"conditions": conditions}})

    # ------------------------------------------------------------------- pods
    def _events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Pod events on any node, forever: LIST then WATCH, re-listing on expiry."""
        while not self._stopping.is_set():
            listed = self._core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName!=", _preload_content=False
            )
            document = _json(listed)
            for item in document.get("items") or []:
                yield "LISTED", item
            version = document["metadata"]["resourceVersion"]
            watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in watcher.stream(
                    self._core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=version,
                    timeout_seconds=60,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                ):
                    if self._stopping.is_set():
                        return
                    raw = event["raw_object"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        yield event["type"], raw
            except client.ApiException as error:
                if error.status != 410:
                    raise
            finally:
                watcher.stop()

    def _serve_pods(self) -> None:
        while not self._stopping.is_set():
            try:
                for _, pod in self._events():
                    self._handle(pod)
            except Exception:
                if self._stopping.is_set():
                    return
                LOG.exception("pod watch failed; listing again")
                self._stopping.wait(1.0)

    def _handle(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in self._addresses:
            return
        namespace, name = metadata["namespace"], metadata["name"]
        try:
            if metadata.get("deletionTimestamp"):
                # The kubelet's last word: the containers are gone, remove the pod now.
                self._core.delete_namespaced_pod(
                    name,
                    namespace,
                    grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0,
                        preconditions=client.V1Preconditions(uid=metadata["uid"]),
                    ),
                )
            elif (pod.get("status") or {}).get("phase", "Pending") == "Pending":
                status = running_status(
                    pod,
                    host_ip=self._addresses[node],
                    pod_ip=next(self._pod_ips),
                    now=self._clock(),
                )
                self._core.patch_namespaced_pod_status(name, namespace, {"status": status})
        except client.ApiException as error:
            if error.status not in (404, 409):
                LOG.warning("pod %s/%s: %s %s", namespace, name, error.status, error.reason)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.register()
        for target, label in ((self._heartbeat, "heartbeat"), (self._serve_pods, "pods")):
            thread = threading.Thread(target=target, name=f"nodeagent-{label}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()

    def wait(self) -> None:
        self._stopping.wait()


def _json(response: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(response.data)
    return document


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--prefix", default="node-")
    parser.add_argument("--cpu", default="8")
    parser.add_argument("--memory", default="32Gi")
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config.load_kube_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    names = [f"{args.prefix}{index}" for index in range(args.nodes)]
    agent = NodeAgent(api, names, shape=NodeShape(cpu=args.cpu, memory=args.memory, gpus=args.gpus))
    agent.start()
    LOG.info("registered %s", ", ".join(names))
    agent.wait()


if __name__ == "__main__":
    main()
