"""``LoopbackApiServer``: wires store, operations, HTTP server, controllers and
scheduler together, and offers the test/demo conveniences (nodes, kubeconfig,
request counts, fault injection)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from .controllers.deployment import DeploymentController
from .controllers.job import JobController
from .controllers.manager import Controller, ControllerManager
from .controllers.replicaset import ReplicaSetController
from .controllers.rootca import RootCAPublisher
from .controllers.scheduler import Scheduler
from .controllers.scoring import FitScoring
from .controllers.statefulset import StatefulSetController
from .discovery import VERSION_INFO
from .handler import ApiApplication, ApiHttpServer
from .json_types import Clock, JsonObject, system_clock
from .operations import ApiOperations
from .resources import ResourceRegistry
from .store import ObjectStore


class LoopbackApiServer:
    """A Kubernetes API server on a loopback port, for the official client."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        controllers: bool = True,
        scheduler: bool = True,
        history_limit: int = 10000,
        bookmark_seconds: float = 5.0,
        clock: Clock = system_clock,
        seed: int = 0,
        scheduler_profiles: dict[str, FitScoring] | None = None,
    ) -> None:
        self._host = host
        self._requested_port = port
        self.store = ObjectStore(history_limit=history_limit)
        self.operations = ApiOperations(self.store, ResourceRegistry(), clock=clock, seed=seed)
        self.operations.ensure_system_namespaces()
        self._application = ApiApplication(
            operations=self.operations, bookmark_seconds=bookmark_seconds
        )
        participants: list[Controller] = []
        if controllers:
            participants += [
                DeploymentController(self.operations),
                ReplicaSetController(self.operations),
                StatefulSetController(self.operations),
                JobController(self.operations),
                RootCAPublisher(self.operations),
            ]
        if scheduler:
            participants.append(Scheduler(self.operations, profiles=scheduler_profiles))
        self._manager = ControllerManager(self.store, participants) if participants else None
        self._http: ApiHttpServer | None = None
        self._serve_thread: threading.Thread | None = None

    # -------------------------------------------------------------- lifecycle
    def start(self) -> LoopbackApiServer:
        if self._http is not None:
            return self
        if self._manager is not None:
            self._manager.start()
        self._http = ApiHttpServer((self._host, self._requested_port), self._application)
        self._application.server_address = f"{self._host}:{self.port}"
        self._serve_thread = threading.Thread(
            target=self._http.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="loopback-apiserver",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def stop(self) -> None:
        self._application.stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.close_connections()
            self._http.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout=5)
        if self._manager is not None:
            self._manager.stop()
        self._http = None

    def __enter__(self) -> LoopbackApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- access
    @property
    def port(self) -> int:
        if self._http is None:
            raise RuntimeError("the server is not started")
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this server."""
        from kubernetes import client  # imported lazily: optional for pure store users

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig (JSON is valid YAML) whose current context is this server."""
        target = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "loopback", "user": {"token": "loopback"}}],
            "contexts": [
                {
                    "name": "loopback",
                    "context": {"cluster": "loopback", "user": "loopback", "namespace": "default"},
                }
            ],
            "current-context": "loopback",
            "preferences": {},
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        # Atomic: supervisors treat the file's existence as "the server is ready".
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(json.dumps(config, indent=2))
        os.replace(partial, target)
        return target

    def add_node(
        self,
        name: str,
        *,
        cpu: str = "8",
        memory: str = "32Gi",
        gpus: int = 4,
        gpu_resource: str = "nvidia.com/gpu",
        labels: dict[str, str] | None = None,
    ) -> JsonObject:
        """Register a Ready node with that capacity (allocatable == capacity)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
        if gpus:
            capacity[gpu_resource] = str(gpus)
        now = self.operations.now()
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        }
        node: JsonObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": {},
            "status": {
                "capacity": dict(capacity),
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    },
                ],
                "addresses": [{"type": "Hostname", "address": name}],
                # What a kubelet reports; kubectl get nodes prints VERSION from it.
                "nodeInfo": {
                    "kubeletVersion": VERSION_INFO["gitVersion"],
                    "kubeProxyVersion": VERSION_INFO["gitVersion"],
                    "osImage": "trainscaler loopback node",
                    "kernelVersion": "loopback",
                    "containerRuntimeVersion": "loopback://0",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
                "phase": "Running",
            },
        }
        nodes = self.operations.resource("", "v1", plural="nodes")
        return self.operations.create_stored(nodes, node, namespace="")

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """True once the controllers have handled every change so far."""
        return self._manager.wait_idle(timeout) if self._manager is not None else True

    def request_counts(self) -> dict[tuple[str, str], int]:
        return self._application.counter.snapshot()

    def reset_request_counts(self) -> None:
        self._application.counter.reset()

    def inject_faults(
        self,
        verb: str | None = "patch",
        rate: float = 0.3,
        *,
        codes: Iterable[int] = (409, 500),
        seed: int = 0,
        resource: str | None = None,
    ) -> None:
        """Fail that fraction of matching requests with those codes (``rate=0`` clears)."""
        self._application.faults.configure(
            verb=verb, rate=rate, codes=codes, seed=seed, resource=resource
        )

    def compact(self) -> None:
        """Drop all watch history: older resourceVersions now answer 410 Gone."""
        self.store.compact()
