"""ElasticJobs on a StatefulSet, a batch Job and a custom resource with ``/scale``,
scaled by real worker and beat processes (issue 17), on the loopback server and,
with ``--real-cluster``, on a real control plane (``scripts/test-real-k8s``).

EDL grows each job to its max (5 GPUs in all, well under the cap of 14):

* ``sigma``: a StatefulSet 1..3 of 1 GPU, pods ``sigma-0..2`` Running;
* ``tau``: a batch Job 1..3 of 1 GPU, scaled through ``spec.parallelism``;
* ``upsilon``: a ``TrainJob`` (a CRD with ``/scale``, no controller) 1..2,
  scaled through its Scale. The ClusterRole grants no custom kind: as
  docs/kubernetes.md says, an installation adds a Role for ``trainjobs/scale``
  (on the real cluster the worker runs as the service account, so this is
  checked for real).

Each job ends with ScaledUp Events and status conditions Ready,
ScalingActive and ScalingLimited (TooManyReplicas at its max). On the real
cluster the worker's own requests, from the audit log, stay within
``workers.adapters.kubernetes.rbac.REQUIRED_PERMISSIONS`` plus that Role, and
none was denied.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from tests.e2e.kube_fixtures import (
    EJ_GROUP,
    EJ_PLURAL,
    EJ_VERSION,
    GPU,
    NAMESPACE,
    KubeCluster,
    KubeE2E,
    kube_cluster_fixture,  # noqa: F401  (registers the fixtures by their names)
    kube_e2e_factory_fixture,  # noqa: F401
    kube_redis_fixture,  # noqa: F401
    wait_for,
)
from tests.e2e.real_cluster import ALL_ROLES_ACCOUNT, SERVICE_ACCOUNT, AuditLog, permissions_used
from tests.integration.trainjob_crd import (
    TRAINJOB_CRD,
    TRAINJOB_GROUP,
    TRAINJOB_PLURAL,
    TRAINJOB_VERSION,
)
from workers.adapters.kubernetes.rbac import REQUIRED_PERMISSIONS

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

SETTLE = 60.0
# What an installation adds for a custom scale target (docs/kubernetes.md).
TRAINJOB_SCALE_ROLE: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "trainscaler-trainjobs", "namespace": NAMESPACE},
    "rules": [
        {
            "apiGroups": [TRAINJOB_GROUP],
            "resources": [f"{TRAINJOB_PLURAL}/scale"],
            "verbs": ["get", "update"],
        }
    ],
}
TRAINJOB_SCALE_BINDING: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "RoleBinding",
    "metadata": {"name": "trainscaler-trainjobs", "namespace": NAMESPACE},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "trainscaler-trainjobs",
    },
    # The all-in-one worker's account (deployed: the scale workers' account, and
    # get alone for the planner's, event workers' and API's).
    "subjects": [{"kind": "ServiceAccount", "name": ALL_ROLES_ACCOUNT, "namespace": "trainscaler"}],
}
MAX = {"sigma": 3, "tau": 3, "upsilon": 2}


def pod_template(app: str, *, restart: str = "Always") -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi", GPU: "1"}, "limits": {GPU: "1"}}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [{"name": "trainer", "image": "trainer:1", "resources": resources}],
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
        },
    }


def elastic_job(name: str, *, api_version: str, kind: str, maximum: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{EJ_GROUP}/{EJ_VERSION}",
        "kind": "ElasticJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": name},
            "minReplicas": 1,
            "maxReplicas": maximum,
            "policy": "edl",
        },
    }


def create_workloads(cluster: KubeCluster) -> None:
    statefulset: Any = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "sigma"},
        "spec": {
            "replicas": 1,
            "serviceName": "sigma",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "sigma"}},
            "template": pod_template("sigma"),
        },
    }
    cluster.apps.create_namespaced_stateful_set(NAMESPACE, statefulset)
    job: Any = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "tau"},
        "spec": {
            "parallelism": 1,
            "completions": 100,
            "template": pod_template("tau", restart="Never"),
        },
    }
    cluster.batch.create_namespaced_job(NAMESPACE, job)
    extensions = k8s.ApiextensionsV1Api(cluster.api)
    try:
        extensions.create_custom_resource_definition(TRAINJOB_CRD)  # type: ignore[arg-type]
    except k8s.ApiException as error:
        if error.status != 409:
            raise
    if cluster.real:
        rbac: Any = k8s.RbacAuthorizationV1Api(cluster.api)
        rbac.create_namespaced_role(NAMESPACE, TRAINJOB_SCALE_ROLE)
        rbac.create_namespaced_role_binding(NAMESPACE, TRAINJOB_SCALE_BINDING)
    trainjob = {
        "apiVersion": f"{TRAINJOB_GROUP}/{TRAINJOB_VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": "upsilon", "namespace": NAMESPACE},
        "spec": {"replicas": 1},
    }

    def created() -> bool:
        try:
            cluster.custom.create_namespaced_custom_object(
                TRAINJOB_GROUP, TRAINJOB_VERSION, NAMESPACE, TRAINJOB_PLURAL, trainjob
            )
        except k8s.ApiException as error:
            if error.status == 404:  # the CRD is not served yet
                return False
            raise
        return True

    wait_for(created, timeout=SETTLE, what="the TrainJob CRD served")
    cluster.custom.patch_namespaced_custom_object_status(
        TRAINJOB_GROUP,
        TRAINJOB_VERSION,
        NAMESPACE,
        TRAINJOB_PLURAL,
        "upsilon",
        {"status": {"replicas": 1, "selector": "app=upsilon"}},
    )
    for name, api_version, kind in (
        ("sigma", "apps/v1", "StatefulSet"),
        ("tau", "batch/v1", "Job"),
        ("upsilon", f"{TRAINJOB_GROUP}/{TRAINJOB_VERSION}", "TrainJob"),
    ):
        cluster.custom.create_namespaced_custom_object(
            EJ_GROUP,
            EJ_VERSION,
            NAMESPACE,
            EJ_PLURAL,
            elastic_job(name, api_version=api_version, kind=kind, maximum=MAX[name]),
        )


def sizes(cluster: KubeCluster) -> dict[str, Any]:
    statefulset = cluster.named("statefulsets.apps", "sigma") or {}
    job = cluster.named("jobs.batch", "tau") or {}
    trainjob: Any = cluster.custom.get_namespaced_custom_object(
        TRAINJOB_GROUP, TRAINJOB_VERSION, NAMESPACE, TRAINJOB_PLURAL, "upsilon"
    )
    return {
        "sigma": (statefulset.get("spec") or {}).get("replicas"),
        "tau": (job.get("spec") or {}).get("parallelism"),
        "upsilon": (trainjob.get("spec") or {}).get("replicas"),
    }


def running(cluster: KubeCluster, app: str) -> list[str]:
    return sorted(
        pod["metadata"]["name"]
        for pod in cluster.pods(app)
        if (pod.get("status") or {}).get("phase") == "Running"
    )


def conditions(cluster: KubeCluster, name: str) -> dict[str, tuple[str, str]]:
    resource = cluster.elastic_job(name) or {}
    found = (resource.get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c["reason"]) for c in found}


def test_elastic_jobs_on_statefulsets_jobs_and_custom_resources(
    kube_cluster: KubeCluster, kube_e2e_factory: Any
) -> None:
    cluster = kube_cluster
    whole_test = AuditLog(cluster.audit.path) if cluster.audit is not None else None
    create_workloads(cluster)
    e2e: KubeE2E = kube_e2e_factory(interval=2.0, load=0.9)

    def grown() -> bool:
        return (
            sizes(cluster) == MAX
            and running(cluster, "sigma") == ["sigma-0", "sigma-1", "sigma-2"]
            and len(running(cluster, "tau")) == 3
        )

    try:
        wait_for(grown, timeout=SETTLE, what=f"the jobs grown to {MAX}", interval=0.5)
    except AssertionError as error:
        logs = "\n".join(proc.log_text()[-3000:] for proc in e2e.procs.started)
        raise AssertionError(f"{error}\nsizes {sizes(cluster)}\n{logs}") from None

    def reported() -> dict[str, Any]:
        found = {}
        for name in MAX:
            resource = cluster.elastic_job(name) or {}
            found[name] = (resource.get("status") or {}).get("currentReplicas")
        return found

    wait_for(lambda: reported() == MAX, timeout=SETTLE, what="status.currentReplicas at max")
    for name in MAX:
        assert conditions(cluster, name) == {
            "Ready": ("True", "TargetFound"),
            "ScalingActive": ("True", "SucceededRescale"),
            "ScalingLimited": ("True", "TooManyReplicas"),
        }, (name, conditions(cluster, name))
    reasons: dict[str, set[str]] = {}
    for event in cluster.objects("events"):
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "ElasticJob":
            reasons.setdefault(str(involved.get("name")), set()).add(str(event.get("reason")))
    assert reasons == {name: {"ScaledUp"} for name in MAX}, reasons

    if whole_test is not None:
        events = whole_test.events()
        assert not whole_test.denied(), whole_test.denied()
        assert {e["user"]["username"] for e in events} == {SERVICE_ACCOUNT}
        extra_role = {(TRAINJOB_GROUP, f"{TRAINJOB_PLURAL}/scale", v) for v in ("get", "update")}
        used = permissions_used(events)
        assert used <= set(REQUIRED_PERMISSIONS) | extra_role, used - set(REQUIRED_PERMISSIONS)
        # The scale of each kind went through its own path.
        assert {
            ("apps", "statefulsets/scale", "update"),
            ("batch", "jobs", "patch"),
            (TRAINJOB_GROUP, f"{TRAINJOB_PLURAL}/scale", "update"),
            ("", "events", "create"),
            ("trainscaler.io", "elasticjobs/status", "update"),
        } <= used, used
