"""What the job driver does on the cluster, through the official ``kubernetes`` client.

Creates each simulated job's Deployment (one GPU per replica) and its
ElasticJob pointing at it, reads how many replicas are ready (the simulated
pods that train) and deletes finished jobs. The
ElasticJob's group, version and plural come from the caller (the CLI takes
them from the Kubernetes adapter's CRD), so they are written down once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

POD_IMAGE = "registry.k8s.io/pause:3.9"
APP_LABEL = "trainscaler.io/job"


@dataclass(frozen=True)
class ElasticJobKind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def deployment_manifest(
    name: str, *, replicas: int, gpu_resource: str, application: str
) -> dict[str, Any]:
    labels = {APP_LABEL: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {**labels, "trainscaler.io/application": application}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "trainer",
                            "image": POD_IMAGE,
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "1Gi"},
                                "limits": {gpu_resource: "1"},
                            },
                        }
                    ]
                },
            },
        },
    }


def elastic_job_manifest(
    kind: ElasticJobKind,
    name: str,
    *,
    min_replicas: int,
    max_replicas: int,
    policy: str | None = None,
    application: str | None = None,
    epochs: int | None = None,
) -> dict[str, Any]:
    """An ElasticJob; no ``policy``: the runtime's cluster policy plans it."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
    }
    optional = {"policy": policy, "application": application, "epochs": epochs}
    spec.update({k: v for k, v in optional.items() if v is not None})
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


class ClusterJobs:
    """The driver's view of the cluster: create jobs, read replicas and GPU use."""

    def __init__(
        self,
        api_client: Any,
        *,
        kind: ElasticJobKind,
        namespace: str = "default",
        gpu_resource: str = "nvidia.com/gpu",
    ) -> None:
        self._api_client = api_client
        self._apps = k8s.AppsV1Api(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._kind = kind
        self.namespace = namespace
        self.gpu_resource = gpu_resource

    def create_job(
        self,
        name: str,
        *,
        application: str,
        replicas: int,
        min_replicas: int,
        max_replicas: int,
        policy: str | None = None,
        identity: str | None = None,
        epochs: int | None = None,
    ) -> None:
        """Create (or leave in place) the job's Deployment and ElasticJob.

        ``identity`` is the ElasticJob's ``application`` (program and batch size).
        """
        deployment: Any = deployment_manifest(
            name, replicas=replicas, gpu_resource=self.gpu_resource, application=application
        )
        elastic: Any = elastic_job_manifest(
            self._kind,
            name,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            policy=policy,
            application=identity,
            epochs=epochs,
        )
        with _exists_ok():
            self._apps.create_namespaced_deployment(self.namespace, deployment)
        with _exists_ok():
            self._custom.create_namespaced_custom_object(
                self._kind.group, self._kind.version, self.namespace, self._kind.plural, elastic
            )

    def replicas(self, name: str) -> tuple[int, int]:
        """(desired, ready) replicas of the job's Deployment."""
        deployment = self._apps.read_namespaced_deployment(name, self.namespace)
        desired = int(deployment.spec.replicas or 0)
        ready = int((deployment.status.ready_replicas if deployment.status else 0) or 0)
        return desired, ready

    def delete_job(self, name: str) -> None:
        with _missing_ok():
            self._custom.delete_namespaced_custom_object(
                self._kind.group, self._kind.version, self.namespace, self._kind.plural, name
            )
        with _missing_ok():
            self._apps.delete_namespaced_deployment(name, self.namespace)


@contextlib.contextmanager
def _exists_ok() -> Any:
    try:
        yield
    except ApiException as error:
        if error.status != 409:
            raise


@contextlib.contextmanager
def _missing_ok() -> Any:
    try:
        yield
    except ApiException as error:
        if error.status != 404:
            raise
