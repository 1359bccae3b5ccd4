"""The Kubernetes adapter against the loopback API server, over real HTTP.

Cache: one LIST then WATCH, no LIST in steady state, re-LIST after 410 Gone.
Scaler: Deployment, StatefulSet, ReplicaSet, batch/v1 Job and a custom
resource with /scale; 409 retried; errors mapped; status and events written;
every request inside the ClusterRole.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from scheduler_core.models import Reason
from scheduler_core.ports import (
    PermanentScaleError,
    ReplicaScaler,
    ScaleRequest,
    TransientScaleError,
)
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes import KubeAdapter, install_crd
from workers.adapters.kubernetes.cache import Informer
from workers.adapters.kubernetes.client import KubeApiError, KubeClient
from workers.adapters.kubernetes.kinds import ELASTICJOBS, ResourceKind
from workers.adapters.kubernetes.rbac import (
    PLANNER_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    SCALE_WORKER_PERMISSIONS,
    Permission,
)
from workers.settings import Settings

T = TypeVar("T")
NS = "ml"
WAIT = 15.0
# With this seed the injected 50% of 409s hits the first PUT of the Scale.
SEED_FAILING_FIRST = 3

TRAINJOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "trainjobs.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "trainjobs",
            "singular": "trainjob",
            "kind": "TrainJob",
            "listKind": "TrainJobList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
TRAINJOBS = ResourceKind("example.com", "v1", "trainjobs", "TrainJob")


def scale(
    scaler: ReplicaScaler,
    job: str,
    replicas: int,
    *,
    reason: str,
    policy: str | None = None,
    rule: str = "test",
    observed: dict[str, Any] | None = None,
) -> int:
    """The port's request for ``job``; the count in force after."""
    request = ScaleRequest(
        job=job,
        replicas=replicas,
        reason=Reason(rule=rule, message=reason),
        policy=policy,
        observed=observed,
    )
    return scaler.scale(request).after


def wait_for(probe: Callable[[], T | None], *, timeout: float = WAIT, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def server() -> Iterator[Any]:
    api = LoopbackApiServer(host="127.0.0.1", port=0, controllers=True, scheduler=True)
    api.start()
    try:
        api.add_node("node-a", cpu="8", memory="32Gi", gpus=4)
        api.add_node("node-b", cpu="8", memory="32Gi", gpus=4)
        install_crd(api.api_client())
        yield api
    finally:
        api.stop()


@pytest.fixture
def kube(server: Any) -> KubeClient:
    """The test's own client for setup and checks (not the adapter's)."""
    client = KubeClient(server.api_client())
    try:
        client.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
    except KubeApiError as error:
        if error.status != 409:
            raise
    return client


@pytest.fixture
def adapter(server: Any) -> Iterator[KubeAdapter]:
    settings = Settings(kube_qps=1000, kube_burst=1000, kube_cache_sync_timeout=WAIT)
    built = KubeAdapter(settings, api_client=server.api_client())
    try:
        yield built
    finally:
        built.close()


# --- object builders ---------------------------------------------------------------


def template(app: str, *, cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory},
                        "limits": {"cpu": cpu, "memory": memory},
                    },
                }
            ]
        },
    }


def create_workload(kube: KubeClient, kind: str, name: str, replicas: int = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": template(name)}
    if kind == "Job":
        # A Job's selector is generated by the server (controller-uid).
        spec["parallelism"] = replicas
        spec["template"]["spec"]["restartPolicy"] = "Never"
        path = f"/apis/batch/v1/namespaces/{NS}/jobs"
        api_version = "batch/v1"
    else:
        spec["selector"] = {"matchLabels": {"app": name}}
        spec["replicas"] = replicas
        if kind == "StatefulSet":
            spec["serviceName"] = name
        plural = {
            "Deployment": "deployments",
            "StatefulSet": "statefulsets",
            "ReplicaSet": "replicasets",
        }[kind]
        path = f"/apis/apps/v1/namespaces/{NS}/{plural}"
        api_version = "apps/v1"
    body = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    return kube.request("POST", path, body=body)


def create_elastic_job(
    kube: KubeClient,
    name: str,
    *,
    api_version: str = "apps/v1",
    kind: str = "Deployment",
    min_replicas: int = 1,
    max_replicas: int = 4,
    paused: bool = False,
    policy: str = "edl",
) -> dict[str, Any]:
    body = {
        "apiVersion": "trainscaler.io/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": name},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "policy": policy,
            "paused": paused,
        },
    }
    return kube.request("POST", ELASTICJOBS.collection_path(NS), body=body)


@contextlib.contextmanager
def crd_without_rules(kube: KubeClient) -> Iterator[None]:
    """The ElasticJob CRD without its x-kubernetes-validations, restored afterwards."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{ELASTICJOBS.plural}.trainscaler.io"
    original = kube.request("GET", path)
    relaxed = copy.deepcopy(original)
    for version in relaxed["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"].pop("x-kubernetes-validations")
    kube.request("PUT", path, body=relaxed)
    try:
        yield
    finally:
        restored = copy.deepcopy(original)
        restored["metadata"]["resourceVersion"] = kube.request("GET", path)["metadata"][
            "resourceVersion"
        ]
        kube.request("PUT", path, body=restored)


def get_elastic_job(kube: KubeClient, name: str) -> dict[str, Any]:
    return kube.request("GET", ELASTICJOBS.object_path(NS, name))


def events_for(kube: KubeClient, name: str) -> list[dict[str, Any]]:
    events = kube.request("GET", f"/api/v1/namespaces/{NS}/events").get("items") or []
    return [e for e in events if e["involvedObject"]["name"] == name]


def lists_in(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    return {key: n for key, n in counts.items() if key[0] == "list"}


def outside_rbac(
    counts: dict[tuple[str, str], int], granted: frozenset[Permission] = REQUIRED_PERMISSIONS
) -> set[tuple[str, str]]:
    """Requests ``granted`` (a role's set; all roles' by default) would not allow."""
    allowed = {(p.verb, p.resource) for p in granted}
    # Discovery (non-resource URLs) is granted to every user by system:discovery.
    return {key for key in counts if key[1] and key not in allowed}


# --- the cache ---------------------------------------------------------------------


def test_cache_lists_once_then_serves_reads_from_watches(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "alpha", replicas=2)
    create_elastic_job(kube, "alpha")
    server.reset_request_counts()
    reader = adapter.cluster_reader()
    cluster = reader.inquire()
    assert cluster.node_count == 2 and cluster.cpu_total_milli == 16000
    assert cluster.gpu_total == 8
    job = wait_for(lambda: next(iter(reader.elastic_jobs()), None), what="alpha in the cache")
    assert (job.key, job.min_replicas, job.max_replicas) == ("ml/alpha", 1, 4)
    assert job.current_replicas == 2 and job.requests.cpu_milli == 1000
    # The simulated controllers create 2 pods; the scheduler binds them.
    wait_for(lambda: reader.inquire().cpu_request_milli == 2000, what="pods in the cache")
    # Goodput predicts its grows from where the job's pods run: the bound pods per node.
    placed = wait_for(
        lambda: sum(reader.elastic_jobs()[0].placement.values()) == 2 or None,
        what="alpha's placement",
    )
    assert placed and set(reader.elastic_jobs()[0].placement) <= set(
        reader.inquire().nodes.nodes_gpu_free
    )
    wait_for(lambda: all(s.watches for s in adapter.cache.stats().values()), what="watches open")
    # The planner's own account allows every request of building its cache.
    assert outside_rbac(server.request_counts(), PLANNER_PERMISSIONS) == set()

    server.reset_request_counts()
    for _ in range(20):
        reader.inquire()
        reader.elastic_jobs()
    assert server.request_counts() == {}, "steady-state reads must not touch the API server"

    # New objects reach the cache through the watches, still without a LIST.
    create_workload(kube, "Deployment", "beta", replicas=1)
    create_elastic_job(kube, "beta", min_replicas=1, max_replicas=2)
    wait_for(lambda: len(reader.elastic_jobs()) == 2, what="beta through the watch")
    wait_for(lambda: reader.inquire().cpu_request_milli == 3000, what="beta's pod")
    counts = server.request_counts()
    assert lists_in(counts) == {}
    assert all(stats.lists == 1 for stats in adapter.cache.stats().values())


def test_cache_relists_after_410_gone(server: Any, kube: KubeClient) -> None:
    create_elastic_job(kube, "first")
    client = KubeClient(server.api_client())
    informer = Informer(client, ELASTICJOBS, watch_timeout_seconds=1, bookmarks=False)
    informer.start()
    try:
        assert informer.wait_synced(WAIT)
        assert [o["metadata"]["name"] for o in informer.list()] == ["first"]
        # Move the server's version past the informer's, then forget history:
        # the informer's next watch resumes from a compacted version.
        create_workload(kube, "Deployment", "unrelated")
        server.compact()
        # The 1-second watch ends and resumes from a version now compacted away.
        wait_for(lambda: informer.stats().gone >= 1, what="a 410 Gone")
        wait_for(lambda: informer.stats().lists >= 2, what="the re-LIST")
        create_elastic_job(kube, "second")
        wait_for(lambda: len(informer.list()) == 2, what="second after the re-LIST")
        assert informer.stats().errors == 0
    finally:
        informer.stop()


def test_cache_reconnects_after_errors_with_backoff(server: Any, kube: KubeClient) -> None:
    create_elastic_job(kube, "first")
    client = KubeClient(server.api_client())
    informer = Informer(client, ELASTICJOBS, watch_timeout_seconds=1, bookmarks=False)
    server.inject_faults(verb="watch", rate=1.0, codes=(500,), seed=0)
    informer.start()
    try:
        assert informer.wait_synced(WAIT)
        wait_for(lambda: informer.stats().errors >= 2, what="failing watches")
        server.inject_faults(verb="watch", rate=0.0, codes=(500,), seed=0)
        create_elastic_job(kube, "second")
        wait_for(lambda: len(informer.list()) == 2, what="second once watches work again")
        assert informer.stats().lists == 1, "a watch error resumes from its version, no LIST"
    finally:
        informer.stop()


# --- the scaler --------------------------------------------------------------------


def target_replicas(kube: KubeClient, kind: str, name: str) -> int:
    if kind == "Job":
        return int(
            kube.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")["spec"][
                "parallelism"
            ]
        )
    if kind == "TrainJob":
        return int(kube.request("GET", TRAINJOBS.object_path(NS, name))["spec"]["replicas"])
    plural = {
        "Deployment": "deployments",
        "StatefulSet": "statefulsets",
        "ReplicaSet": "replicasets",
    }[kind]
    return int(
        kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/{plural}/{name}")["spec"]["replicas"]
    )


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "Job"])
def test_scaler_scales_workloads_and_writes_status_and_events(
    server: Any, kube: KubeClient, adapter: KubeAdapter, kind: str
) -> None:
    api_version = "batch/v1" if kind == "Job" else "apps/v1"
    create_workload(kube, kind, "trainer", replicas=1)
    create_elastic_job(kube, "trainer", api_version=api_version, kind=kind, max_replicas=4)
    scaler = adapter.replica_scaler()

    server.reset_request_counts()
    after = scale(scaler, "ml/trainer", 3, reason="grew 1 -> 3", policy="edl", rule="edl.scale_up")
    counts = server.request_counts()
    assert after == 3 and target_replicas(kube, kind, "trainer") == 3
    # The scale worker's own account allows every request of the scale path.
    assert outside_rbac(counts, SCALE_WORKER_PERMISSIONS) == set()
    # Without the planner's copy: one read of the ElasticJob, then the target read
    # before each write (the loopback workload controller may still be writing the
    # new workload's status: a 409, re-read), one event, one status write.
    target_read, target_write = (
        (("get", "jobs"), ("patch", "jobs"))
        if kind == "Job"
        else (("get", f"{kind.lower()}s/scale"), ("update", f"{kind.lower()}s/scale"))
    )
    writes, reads = counts.pop(target_write), counts.pop(target_read, 0)
    assert writes == reads
    assert counts == {
        ("get", "elasticjobs"): 1,
        ("create", "events"): 1,
        ("update", "elasticjobs/status"): 1,
    }

    status = get_elastic_job(kube, "trainer")["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (3, 3)
    assert status["lastDecision"] == {
        "policy": "edl",
        "rule": "edl.scale_up",
        "reason": "grew 1 -> 3",
    }
    assert status["observedGeneration"] >= 1 and status["lastScaleTime"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["ScalingActive"]["status"] == "True"
    assert conditions["ScalingLimited"]["status"] == "False"
    assert [e["reason"] for e in events_for(kube, "trainer")] == ["ScaledUp"]

    # With the planner's copy of the ElasticJob: the one read is the target's.
    observed = get_elastic_job(kube, "trainer")
    server.reset_request_counts()
    assert scale(scaler, "ml/trainer", 2, reason="shrank 3 -> 2", observed=observed) == 2
    counts = server.request_counts()
    assert ("get", "elasticjobs") not in counts
    assert counts[target_read] == counts[target_write] >= 1
    assert target_replicas(kube, kind, "trainer") == 2
    # The count in force is only confirmed: one read, no target write.
    server.reset_request_counts()
    assert scale(scaler, "ml/trainer", 2, reason="confirm") == 2
    counts = server.request_counts()
    assert counts[target_read] == 1 and target_write not in counts
    assert sorted(e["reason"] for e in events_for(kube, "trainer")) == ["ScaledDown", "ScaledUp"]


def test_scaler_scales_a_custom_resource_through_its_scale_subresource(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    kube.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=TRAINJOB_CRD
    )
    wait_for(lambda: _served(kube, TRAINJOBS), what="the TrainJob CRD served")
    kube.request(
        "POST",
        TRAINJOBS.collection_path(NS),
        body={
            "apiVersion": "example.com/v1",
            "kind": "TrainJob",
            "metadata": {"name": "pt", "namespace": NS},
            "spec": {"replicas": 2},
            "status": {"replicas": 2, "selector": "app=pt"},
        },
    )
    create_elastic_job(kube, "pt", api_version="example.com/v1", kind="TrainJob", max_replicas=8)
    scaler = adapter.replica_scaler()
    assert scale(scaler, "ml/pt", 5, reason="grew") == 5
    assert target_replicas(kube, "TrainJob", "pt") == 5
    assert get_elastic_job(kube, "pt")["status"]["currentReplicas"] == 5
    # The reader sees a CR target through a GET of /scale (not a LIST).
    reader = adapter.cluster_reader()
    wait_for(lambda: "ml/pt" in {job.key for job in reader.elastic_jobs()}, what="pt cached")
    wait_for(lambda: all(s.watches for s in adapter.cache.stats().values()), what="watches open")
    server.reset_request_counts()
    jobs = {job.key: job for job in reader.elastic_jobs()}
    assert jobs["ml/pt"].current_replicas == 5
    counts = server.request_counts()
    assert counts == {("get", "trainjobs/scale"): 1}
    assert jobs["ml/pt"].requests.cpu_milli == 0  # no pods yet to learn resources from


def _served(kube: KubeClient, kind: ResourceKind) -> bool:
    try:
        kube.request("GET", kind.collection_path(NS))
    except KubeApiError:
        return False
    return True


def test_scale_clamps_to_max_and_reports_the_limit(kube: KubeClient, adapter: KubeAdapter) -> None:
    create_workload(kube, "Deployment", "capped", replicas=1)
    create_elastic_job(kube, "capped", max_replicas=3)
    assert scale(adapter.replica_scaler(), "ml/capped", 10, reason="wants more") == 3
    limited = {c["type"]: c for c in get_elastic_job(kube, "capped")["status"]["conditions"]}
    assert limited["ScalingLimited"]["status"] == "True"
    assert limited["ScalingLimited"]["reason"] == "TooManyReplicas"


def test_paused_job_is_never_written(server: Any, kube: KubeClient, adapter: KubeAdapter) -> None:
    create_workload(kube, "Deployment", "frozen", replicas=2)
    create_elastic_job(kube, "frozen", paused=True)
    scaler = adapter.replica_scaler()
    server.reset_request_counts()
    assert scale(scaler, "ml/frozen", 4, reason="would grow") == 2
    writes = {k for k in server.request_counts() if k[0] in {"update", "patch", "create"}}
    assert writes == set()
    assert target_replicas(kube, "Deployment", "frozen") == 2


def test_conflicts_are_reread_and_retried(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "busy", replicas=1)
    create_elastic_job(kube, "busy")
    scaler = adapter.replica_scaler()
    server.reset_request_counts()
    server.inject_faults(
        verb="update", rate=0.5, codes=(409,), seed=SEED_FAILING_FIRST, resource="deployments/scale"
    )
    assert scale(scaler, "ml/busy", 2, reason="grew") == 2
    counts = server.request_counts()
    server.inject_faults(verb="update", rate=0.0, codes=(409,), seed=0)
    assert target_replicas(kube, "Deployment", "busy") == 2
    assert counts[("update", "deployments/scale")] >= 2, "the seed must make a conflict"
    # Each attempt re-reads the Scale before writing again.
    assert counts[("get", "deployments/scale")] == counts[("update", "deployments/scale")]


def test_a_stale_observed_copy_costs_a_status_conflict_then_a_reread(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "moved", replicas=1)
    create_elastic_job(kube, "moved", max_replicas=8)
    scaler = adapter.replica_scaler()
    stale = get_elastic_job(kube, "moved")
    # The job changes after the planner's cache saw it (a status write of another scale).
    assert scale(scaler, "ml/moved", 2, reason="grew") == 2
    server.reset_request_counts()
    assert scale(scaler, "ml/moved", 3, reason="grew", observed=stale) == 3
    counts = server.request_counts()
    assert target_replicas(kube, "Deployment", "moved") == 3
    # The /status PUT with the stale resourceVersion is a 409: the job is read once and
    # the status written again; the target itself was read (and written) with its own.
    assert counts[("update", "elasticjobs/status")] == 2
    assert counts[("get", "elasticjobs")] == 1
    assert get_elastic_job(kube, "moved")["status"]["currentReplicas"] == 3


def test_lasting_conflict_is_transient_and_recorded(
    server: Any, kube: KubeClient, adapter: KubeAdapter
) -> None:
    create_workload(kube, "Deployment", "stuck", replicas=1)
    create_elastic_job(kube, "stuck")
    scaler = adapter.replica_scaler()
    server.reset_request_counts()
    server.inject_faults(verb="update", rate=1.0, codes=(409,), seed=0)
    with pytest.raises(TransientScaleError):
        scale(scaler, "ml/stuck", 2, reason="grew")
    counts = server.request_counts()
    server.inject_faults(verb="update", rate=0.0, codes=(409,), seed=0)
    assert counts[("update", "deployments/scale")] == 4  # first try + 3 retries
    assert [e["reason"] for e in events_for(kube, "stuck")] == ["ScaleFailed"]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (500, TransientScaleError),
        (429, TransientScaleError),
        (403, PermanentScaleError),
        (422, PermanentScaleError),
    ],
)
def test_api_errors_are_mapped(
    server: Any, kube: KubeClient, adapter: KubeAdapter, code: int, error: type[Exception]
) -> None:
    create_workload(kube, "Deployment", "flaky", replicas=1)
    create_elastic_job(kube, "flaky")
    server.inject_faults(verb="update", rate=1.0, codes=(code,), seed=0)
    try:
        with pytest.raises(error):
            scale(adapter.replica_scaler(), "ml/flaky", 2, reason="grew")
    finally:
        server.inject_faults(verb="update", rate=0.0, codes=(code,), seed=0)


def test_missing_job_or_target_is_permanent(kube: KubeClient, adapter: KubeAdapter) -> None:
    scaler = adapter.replica_scaler()
    with pytest.raises(PermanentScaleError):
        scale(scaler, "ml/nobody", 2, reason="grew")
    create_elastic_job(kube, "orphan")  # its Deployment does not exist
    with pytest.raises(PermanentScaleError):
        scale(scaler, "ml/orphan", 2, reason="grew")
    assert [e["reason"] for e in events_for(kube, "orphan")] == ["ScaleFailed"]
    # Bounds the CRD's CEL rule forbids: the server refuses them, as a real one does...
    create_workload(kube, "Deployment", "inverted", replicas=1)
    with pytest.raises(KubeApiError) as refused:
        create_elastic_job(kube, "inverted", min_replicas=5, max_replicas=2)
    assert refused.value.status == 422
    # ...but a cluster whose CRD predates the rule lets them in; the scaler refuses them too.
    with crd_without_rules(kube):
        create_elastic_job(kube, "inverted", min_replicas=5, max_replicas=2)
    with pytest.raises(PermanentScaleError, match="invalid bounds"):
        scale(scaler, "ml/inverted", 3, reason="grew")
    assert target_replicas(kube, "Deployment", "inverted") == 1


def _elastic_job_in(kube: KubeClient, namespace: str, name: str) -> None:
    with contextlib.suppress(KubeApiError):  # the namespace may exist already
        kube.request(
            "POST", "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )  # fmt: skip
    body = {
        "apiVersion": "trainscaler.io/v1alpha1",
        "kind": "ElasticJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 4,
        },
    }
    kube.request("POST", ELASTICJOBS.collection_path(namespace), body=body)


@pytest.mark.parametrize("scope", [("ml",), ("ml", "team-b")], ids=["one", "two"])
def test_watches_and_writes_are_scoped_to_trainscaler_namespaces(
    server: Any, kube: KubeClient, scope: tuple[str, ...]
) -> None:
    for namespace in ("ml", "team-b", "kube-system"):
        _elastic_job_in(kube, namespace, "j")
    settings = Settings(
        kube_qps=1000, kube_burst=1000, kube_cache_sync_timeout=WAIT, namespaces=scope
    )
    adapter = KubeAdapter(settings, api_client=server.api_client())
    try:
        cache = adapter.cache
        cache.ensure_synced(WAIT)
        seen = {o["metadata"]["namespace"] for o in cache.informer(ELASTICJOBS).list()}
        assert seen == set(scope)
        # Every watch of a job kind is namespaced: no cluster-wide ElasticJob or workload list.
        for plural, informer in cache.informers.items():
            parts = getattr(informer, "_parts", [informer])
            paths = {part._path for part in parts}
            if plural in {"nodes", "pods"}:
                assert paths == {f"/api/v1/{plural}"}  # capacity: cluster-wide, read-only
            else:
                assert paths == {p for p in paths if "/namespaces/" in p} and len(paths) == len(
                    scope
                )
        # The scaler refuses an out-of-scope job before any request.
        server.reset_request_counts()
        with pytest.raises(PermanentScaleError, match="outside TRAINSCALER_NAMESPACES"):
            scale(adapter.replica_scaler(), "kube-system/j", 3, reason="test")
        # (The cache's watches may reconnect meanwhile; no read or write of a job may happen.)
        assert not {k for k in server.request_counts() if k[0] in {"get", "update", "patch"}}
    finally:
        adapter.close()
