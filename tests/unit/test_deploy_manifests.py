"""deploy/: every manifest validated offline, the CRD identical to crd.py, RBAC exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from celpy.adapter import json_to_cel

from scheduler_core.quantities import parse_quantity
from workers.adapters.kubernetes.crd import ELASTICJOB_CRD, render_yaml
from workers.adapters.kubernetes.rbac import (
    CLUSTER_READ_PERMISSIONS,
    LEASE_NAMED_VERBS,
    LEASE_PERMISSIONS,
    NAMESPACED_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    ROLE_PERMISSIONS,
    Permission,
)
from workers.adapters.kubernetes.selectors import from_label_selector
from workers.celery_app import CLUSTER_WRITES, CONTROL, EVENTS, TASK_ROUTES
from workers.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S_VERSION = kubernetes_validate.latest_version()
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
NAMESPACED_RBAC = DEPLOY / "namespaced" / "rbac-namespaced.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def all_documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in documents(path)]


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in all_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


@pytest.mark.parametrize("path", [*MANIFESTS, NAMESPACED_RBAC], ids=lambda p: p.name)
def test_every_manifest_validates_strictly(path: Path) -> None:
    docs = documents(path)
    assert docs, f"{path.name} is empty"
    for doc in docs:
        # Raises ValidationError on any schema violation or unknown field.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_validator_rejects_a_broken_manifest() -> None:
    broken = documents(DEPLOY / "scale-workers.yaml")[0]
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "trainscaler"
    assert sorted(kustomization["resources"]) == sorted(p.name for p in MANIFESTS)


def test_namespaced_objects_live_in_the_trainscaler_namespace() -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for doc in all_documents():
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == "trainscaler", doc["metadata"]["name"]


# --- the CRD -------------------------------------------------------------------


def test_crd_yaml_is_generated_from_crd_py() -> None:
    text = (DEPLOY / "crd.yaml").read_text()
    assert yaml.safe_load(text) == ELASTICJOB_CRD
    assert text == render_yaml(), "regenerate: python -m workers.adapters.kubernetes.crd"


def _version() -> dict[str, Any]:
    version: dict[str, Any] = ELASTICJOB_CRD["spec"]["versions"][0]
    return version


def test_crd_identity_and_subresources() -> None:
    spec = ELASTICJOB_CRD["spec"]
    assert ELASTICJOB_CRD["metadata"]["name"] == "elasticjobs.trainscaler.io"
    assert spec["group"] == "trainscaler.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["ej"]
    assert _version()["name"] == "v1alpha1"
    assert _version()["subresources"] == {"status": {}}


def test_crd_schema_enforces_replica_bounds() -> None:
    spec_schema = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec_schema["properties"]
    assert props["minReplicas"]["minimum"] == 0
    assert props["maxReplicas"]["minimum"] == 0
    rules = [v["rule"] for v in spec_schema["x-kubernetes-validations"]]
    assert any("self.minReplicas <= self.maxReplicas" in rule for rule in rules)
    assert set(spec_schema["required"]) == {"scaleTargetRef", "maxReplicas"}
    assert set(props["scaleTargetRef"]["required"]) == {"apiVersion", "kind", "name"}
    assert {"policy", "defaultParallelism", "paused"} <= set(props)


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def spec_is_valid(spec: dict[str, Any]) -> bool:
    """What the API server checks: the OpenAPI schema, then the CEL rules."""
    schema = _spec_schema()
    if list(jsonschema.Draft7Validator(schema).iter_errors(spec)):
        return False
    environment = celpy.Environment()
    for validation in schema["x-kubernetes-validations"]:
        program = environment.program(environment.compile(validation["rule"]))
        if not program.evaluate({"self": json_to_cel(spec)}):
            return False
    return True


TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}


@pytest.mark.parametrize(
    ("bounds", "valid"),
    [
        ({"minReplicas": 0, "maxReplicas": 0}, True),
        ({"minReplicas": 2, "maxReplicas": 8}, True),
        ({"minReplicas": 8, "maxReplicas": 8}, True),
        ({"maxReplicas": 3}, True),  # minReplicas defaults to 1
        ({"minReplicas": 9, "maxReplicas": 8}, False),
        ({"minReplicas": -1, "maxReplicas": 8}, False),
        ({"minReplicas": 0, "maxReplicas": -1}, False),
        ({"minReplicas": 1}, False),  # maxReplicas is required
    ],
)
def test_crd_admits_exactly_0_le_min_le_max(bounds: dict[str, int], valid: bool) -> None:
    assert spec_is_valid({"scaleTargetRef": TARGET, **bounds}) is valid


def test_crd_requires_a_complete_scale_target() -> None:
    assert not spec_is_valid({"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 2})
    assert not spec_is_valid({"maxReplicas": 2})


def test_crd_status_and_printer_columns() -> None:
    status = _version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {
        "currentReplicas",
        "desiredReplicas",
        "lastScaleTime",
        "lastDecision",
        "observedGeneration",
        "conditions",
    } <= set(status)
    assert set(status["lastDecision"]["properties"]) == {"policy", "rule", "reason"}
    condition_types = status["conditions"]["items"]["properties"]["type"]["enum"]
    assert condition_types == ["Ready", "ScalingActive", "ScalingLimited"]
    columns = {c["name"]: c["jsonPath"] for c in _version()["additionalPrinterColumns"]}
    assert columns == {
        "Min": ".spec.minReplicas",
        "Max": ".spec.maxReplicas",
        "Current": ".status.currentReplicas",
        "Desired": ".status.desiredReplicas",
        "Policy": ".spec.policy",
        "Age": ".metadata.creationTimestamp",
    }


# --- RBAC ----------------------------------------------------------------------

# What each role's code asks the API server for, written out here from reading
# the code (not derived from deploy/ nor from workers/adapters/kubernetes/rbac.py):
# (apiGroup, resource, verb). The integration tests check the real requests.
EJ = "trainscaler.io"
APPS_KINDS = ("deployments", "statefulsets", "replicasets")
USES: dict[str, set[Permission]] = {
    # cache.py: one LIST then a WATCH per cached kind; finish's direct.py listing.
    "planner": {
        Permission("", "nodes", "list"),
        Permission("", "nodes", "watch"),
        Permission("", "pods", "list"),
        Permission("", "pods", "watch"),
        *(Permission("apps", kind, verb) for kind in APPS_KINDS for verb in ("list", "watch")),
        Permission("batch", "jobs", "list"),
        Permission("batch", "jobs", "watch"),
        Permission(EJ, "elasticjobs", "list"),
        Permission(EJ, "elasticjobs", "watch"),
    },
    # scaler.py: GET/PUT of <kind>/scale, GET + merge PATCH of batch Jobs, GET of the
    # ElasticJob (no planner copy, or after a 409), PUT of its /status; events.py: POST.
    "scale-worker": {
        *(
            Permission("apps", f"{kind}/scale", verb)
            for kind in APPS_KINDS
            for verb in ("get", "update")
        ),
        Permission("batch", "jobs", "get"),
        Permission("batch", "jobs", "patch"),
        Permission(EJ, "elasticjobs", "get"),
        Permission(EJ, "elasticjobs/status", "update"),
        Permission("", "events", "create"),
    },
    # direct.py: paged LISTs of ElasticJobs and the built-in kinds they target, and
    # submit's one GET of an ElasticJob (has_elastic_job).
    "event-worker": {
        Permission(EJ, "elasticjobs", "get"),
        Permission(EJ, "elasticjobs", "list"),
        *(Permission("apps", kind, "list") for kind in APPS_KINDS),
        Permission("batch", "jobs", "list"),
    },
    # The same reader (GET /jobs, a submission's target check); /health asks /version.
    "api": {
        Permission(EJ, "elasticjobs", "get"),
        Permission(EJ, "elasticjobs", "list"),
        *(Permission("apps", kind, "list") for kind in APPS_KINDS),
        Permission("batch", "jobs", "list"),
    },
}
# lease.py: GET and PUT of the one Lease by name, POST to create it.
LEASE_USES = {
    Permission("coordination.k8s.io", "leases", "get"),
    Permission("coordination.k8s.io", "leases", "update"),
    Permission("coordination.k8s.io", "leases", "create"),
}
KUBE_ROLES = list(USES)
NO_KUBERNETES = ["beat", "flower", "kubeml-api"]


def rules_of(role: dict[str, Any]) -> list[tuple[Permission, tuple[str, ...]]]:
    """Each granted permission with the resourceNames it is limited to (() when none)."""
    found = []
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        names = tuple(rule.get("resourceNames", ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {rule}"
                    found.append((Permission(group, resource, verb), names))
    return found


def granted(role: dict[str, Any]) -> set[Permission]:
    return {permission for permission, _ in rules_of(role)}


def account_of(role: str) -> str:
    spec = find("Deployment", f"trainscaler-{role}")["spec"]["template"]["spec"]
    account: str = spec["serviceAccountName"]
    return account


def bound_roles(
    account: str, docs: list[dict[str, Any]]
) -> list[tuple[str | None, dict[str, Any]]]:
    """(namespace or None for cluster-wide, role) of every binding naming ``account``."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": "trainscaler"}
    found = []
    for binding in docs:
        if binding["kind"] not in {"ClusterRoleBinding", "RoleBinding"}:
            continue
        if subject not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        namespace = (
            binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        )
        matches = [
            d
            for d in docs
            if d["kind"] == ref["kind"]
            and d["metadata"]["name"] == ref["name"]
            and d["metadata"].get("namespace") == (namespace if ref["kind"] == "Role" else None)
        ]
        assert len(matches) == 1, f"{binding['metadata']['name']} refers to a missing {ref}"
        found.append((namespace, matches[0]))
    return found


@pytest.mark.parametrize("role", KUBE_ROLES)
def test_each_role_runs_as_its_own_account(role: str) -> None:
    account = account_of(role)
    assert account == f"trainscaler-{role}"
    assert find("ServiceAccount", account)["metadata"]["namespace"] == "trainscaler"
    spec = find("Deployment", f"trainscaler-{role}")["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken", True) is True
    others = [account_of(r) for r in KUBE_ROLES if r != role]
    assert account not in others  # never shared: one role's rights are not another's


@pytest.mark.parametrize("role", KUBE_ROLES)
def test_each_roles_account_holds_exactly_what_its_code_uses(role: str) -> None:
    bound = bound_roles(account_of(role), all_documents())
    cluster_wide = set().union(*(granted(r) for ns, r in bound if ns is None))
    assert cluster_wide == USES[role], (
        f"missing {USES[role] - cluster_wide}, extra {cluster_wide - USES[role]}"
    )
    namespaced = {ns: granted(r) for ns, r in bound if ns is not None}
    assert namespaced == ({"trainscaler": LEASE_USES} if role == "planner" else {})


def test_only_the_scale_workers_write_to_the_cluster() -> None:
    reads = {"get", "list", "watch"}
    writers = {role for role in KUBE_ROLES if any(p.verb not in reads for p in USES[role])}
    assert writers == {"scale-worker"}
    for role in KUBE_ROLES:
        bound = bound_roles(account_of(role), all_documents())
        writes = {p for ns, r in bound if ns is None for p in granted(r) if p.verb not in reads}
        assert (writes != set()) == (role == "scale-worker"), (role, writes)


def test_the_planner_lease_is_named_wherever_kubernetes_allows_it() -> None:
    role = find("Role", "trainscaler-planner-lease")
    assert role["metadata"]["namespace"] == "trainscaler"
    lease_name = Settings.model_fields["planner_lease_name"].default
    # The deployed Lease name is the default one: nothing overrides it.
    planner = find("Deployment", "trainscaler-planner")
    assert "TRAINSCALER_PLANNER_LEASE_NAME" not in env_values(planner)
    assert "TRAINSCALER_PLANNER_LEASE_NAME" not in find("ConfigMap", "trainscaler-settings")["data"]
    limits = {permission.verb: names for permission, names in rules_of(role)}
    assert set(limits) == {p.verb for p in LEASE_USES}
    assert limits["get"] == limits["update"] == (lease_name,)
    # A create's URL has no name (it is in the body): resourceNames never match a
    # create, so that rule cannot name the Lease and must not try (it would deny it).
    assert limits["create"] == ()
    binding = find("RoleBinding", "trainscaler-planner-lease")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainscaler-planner", "namespace": "trainscaler"}
    ]


@pytest.mark.parametrize("name", NO_KUBERNETES)
def test_pods_that_never_call_kubernetes_mount_no_token(name: str) -> None:
    spec = find("Deployment", f"trainscaler-{name}")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec


def test_the_permission_sets_in_code_are_the_ones_the_roles_use() -> None:
    """rbac.py's sets (the integration tests check real requests against them) match USES."""
    assert {role: set(p) for role, p in ROLE_PERMISSIONS.items()} == USES
    assert (
        set(REQUIRED_PERMISSIONS) == USES["planner"] | USES["scale-worker"] | USES["event-worker"]
    )
    assert set(LEASE_PERMISSIONS) == LEASE_USES
    assert {p.verb for p in LEASE_PERMISSIONS} - LEASE_NAMED_VERBS == {"create"}


def test_the_namespaced_alternative_grants_each_role_per_namespace() -> None:
    docs = documents(NAMESPACED_RBAC)
    capacity = {Permission("", r, v) for r in ("nodes", "pods") for v in ("list", "watch")}
    assert set(CLUSTER_READ_PERMISSIONS) == capacity
    for role in KUBE_ROLES:
        bound = bound_roles(f"trainscaler-{role}", docs)
        cluster_wide = set().union(*(granted(r) for ns, r in bound if ns is None))
        # Capacity is cluster-wide: only the planner, which plans with it, reads it.
        assert cluster_wide == (capacity if role == "planner" else set()), role
        in_team_a = set().union(*(granted(r) for ns, r in bound if ns == "team-a"))
        assert in_team_a == USES[role] - capacity, role
        assert {ns for ns, _ in bound} <= {None, "team-a"}
    assert set(NAMESPACED_PERMISSIONS) == set(REQUIRED_PERMISSIONS) - capacity
    for doc in docs:
        if doc["kind"] in {"Role", "RoleBinding"}:
            assert doc["metadata"]["namespace"] == "team-a"
    kustomization = yaml.safe_load((NAMESPACED_RBAC.parent / "kustomization.yaml").read_text())
    assert "namespace" not in kustomization  # the Roles keep their namespaces
    assert kustomization["resources"] == [NAMESPACED_RBAC.name]


# --- workloads -------------------------------------------------------------------


ROLES = ["planner", "scale-worker", "event-worker"]
REDIS_CLIENTS = [*ROLES, "beat", "flower", "api"]


@pytest.mark.parametrize("name", REDIS_CLIENTS)
def test_deployment_selectors_match_their_pods(name: str) -> None:
    deployment = find("Deployment", f"trainscaler-{name}")
    assert from_label_selector(deployment["spec"]["selector"]).matches(pod_labels(deployment))
    assert container(deployment)["image"].startswith("trainscaler:")


def env_values(workload: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(workload)["env"] if "value" in e}


def option(command: list[str], *names: str) -> str:
    """The value after the first of ``names`` in ``command`` (exactly one occurrence)."""
    found = [i for i, word in enumerate(command) if word in names]
    assert len(found) == 1, (names, command)
    return command[found[0] + 1]


def memory_bytes(quantity: str) -> float:
    return float(parse_quantity(quantity))


def test_every_queue_has_exactly_one_role_consuming_it() -> None:
    """Scale and event workers each consume one queue; the planner owns `control`."""
    consumed: dict[str, str] = {"control": "planner"}  # `trainscaler planner`: -Q control
    for role in ("scale-worker", "event-worker"):
        command = container(find("Deployment", f"trainscaler-{role}"))["command"]
        assert command[:4] == ["celery", "-A", "workers", "worker"]
        queues = option(command, "-Q", "--queues").split(",")
        assert len(queues) == 1, f"{role} consumes {queues}: one queue per role"
        assert queues[0] not in consumed, f"{queues[0]} consumed twice"
        consumed[queues[0]] = role
    assert consumed == {
        "control": "planner",
        "cluster-writes": "scale-worker",
        "events": "event-worker",
    }
    routed = {route["queue"] for route in TASK_ROUTES.values()}
    assert routed == set(consumed) == {CONTROL, EVENTS, CLUSTER_WRITES}


@pytest.mark.parametrize("role", ["scale-worker", "event-worker"])
def test_workers_set_their_concurrency_explicitly(role: str) -> None:
    # Without it prefork starts one child per node CPU under a fixed memory limit.
    command = container(find("Deployment", f"trainscaler-{role}"))["command"]
    assert int(option(command, "--concurrency", "-c")) >= 1
    assert "--pool" not in command  # prefork: the children share the imported code


def test_the_planner_is_one_active_and_one_standby() -> None:
    planner = find("Deployment", "trainscaler-planner")
    assert planner["spec"]["replicas"] == 2
    assert container(planner)["command"][:2] == ["trainscaler", "planner"]
    assert planner["spec"]["template"]["spec"]["serviceAccountName"] == "trainscaler-planner"
    # The new pod is up (as the standby) before an old one goes.
    assert planner["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    # The Lease is taken in the pod's own namespace, where the lease Role grants it.
    env = {e["name"]: e for e in container(planner)["env"]}
    lease_namespace = env["TRAINSCALER_PLANNER_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]
    assert lease_namespace == {"fieldPath": "metadata.namespace"}
    assert find("Role", "trainscaler-planner-lease")["metadata"]["namespace"] == "trainscaler"


@pytest.mark.parametrize("role", ROLES)
def test_every_role_sends_task_events_for_flower(role: str) -> None:
    # Flower's task view and its /metrics (Celery task metrics) exist only with events.
    assert "--task-events" in container(find("Deployment", f"trainscaler-{role}"))["command"]


@pytest.mark.parametrize("role", ROLES)
def test_liveness_reads_the_heartbeat_and_never_the_broker(role: str) -> None:
    workload = find("Deployment", f"trainscaler-{role}")
    main = container(workload)
    command = main["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["trainscaler", "healthcheck"]
    assert "celery" not in " ".join(command) and "redis" not in " ".join(command)
    env = env_values(workload)
    assert env["TRAINSCALER_HEARTBEAT_FILE"].startswith("/tmp/")  # the writable emptyDir
    assert {"name": "tmp", "mountPath": "/tmp"} in main["volumeMounts"]
    max_age = float(option(command, "--max-age"))
    # Several missed beats before a failure, and the kubelet waits for more failures.
    assert max_age >= 3 * float(env["TRAINSCALER_HEARTBEAT_INTERVAL"])
    assert main["livenessProbe"]["failureThreshold"] >= 2


@pytest.mark.parametrize("role", ["scale-worker", "event-worker"])
def test_worker_readiness_is_a_ping_through_the_broker(role: str) -> None:
    main = container(find("Deployment", f"trainscaler-{role}"))
    command = " ".join(main["readinessProbe"]["exec"]["command"])
    assert "celery -A workers inspect ping -d celery@$HOSTNAME" in command


def test_resources_follow_the_issue_16_sizing() -> None:
    """Scale and event workers hold no cluster cache: small. The planner holds it."""
    requests = {
        role: container(find("Deployment", f"trainscaler-{role}"))["resources"] for role in ROLES
    }
    for role, resources in requests.items():
        assert memory_bytes(resources["limits"]["memory"]) >= memory_bytes(
            resources["requests"]["memory"]
        ), role
        assert "cpu" in resources["requests"], role
    # An idle prefork worker with --concurrency 4 measured about 170 MB PSS.
    for role in ("scale-worker", "event-worker"):
        assert 256 * 2**20 <= memory_bytes(requests[role]["requests"]["memory"]) <= 512 * 2**20
    # The planner's cache: 496 MB RSS at 5,000 nodes (issue 16's baseline).
    assert memory_bytes(requests["planner"]["requests"]["memory"]) >= 496 * 10**6


# Every pod serves its own /metrics; Prometheus finds them by the pod annotations.
SCRAPED = {"planner": "metrics", "scale-worker": "metrics", "event-worker": "metrics"}
SCRAPED_ELSEWHERE = {"api": "http", "flower": "http"}


def container_port(workload: dict[str, Any], name: str) -> int:
    ports = {p["name"]: p["containerPort"] for p in container(workload).get("ports", [])}
    assert name in ports, (name, ports)
    return int(ports[name])


@pytest.mark.parametrize("role", [*SCRAPED, *SCRAPED_ELSEWHERE])
def test_every_pod_is_scraped_on_the_port_it_serves(role: str) -> None:
    workload = find("Deployment", f"trainscaler-{role}")
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    port = container_port(workload, {**SCRAPED, **SCRAPED_ELSEWHERE}[role])
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    if role in SCRAPED:
        env = env_values(workload)
        # The worker's listener (Settings.worker_metrics_port), reachable from outside the pod.
        assert int(env["TRAINSCALER_WORKER_METRICS_PORT"]) == port
        assert env["TRAINSCALER_WORKER_METRICS_ADDRESS"] == "0.0.0.0"


@pytest.mark.parametrize("role", ["scale-worker", "event-worker"])
def test_prefork_workers_merge_their_children_from_a_writable_directory(role: str) -> None:
    """Without PROMETHEUS_MULTIPROC_DIR a prefork pod serves only its main process (0 tasks)."""
    workload = find("Deployment", f"trainscaler-{role}")
    main = container(workload)
    assert "--pool" not in main["command"] and int(option(main["command"], "--concurrency")) > 1
    directory = env_values(workload)["PROMETHEUS_MULTIPROC_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    # Its own emptyDir (the root filesystem is read-only): files live as long as the pod.
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert "emptyDir" in volumes[mounts[directory]], volumes


def test_the_planner_serves_its_solo_pool_without_a_multiprocess_directory() -> None:
    # Solo: tasks run in the main process, whose registry the endpoint serves (a
    # directory would be emptied at worker start under the standby's live files).
    planner = find("Deployment", "trainscaler-planner")
    assert "PROMETHEUS_MULTIPROC_DIR" not in env_values(planner)


def test_beat_runs_redbeat_with_two_replicas() -> None:
    beat = find("Deployment", "trainscaler-beat")
    assert beat["spec"]["replicas"] == 2
    assert (
        "--scheduler=workers.adapters.beat_scheduler:FailoverTolerantScheduler"
        in container(beat)["command"]
    )


def generated_secrets() -> dict[str, dict[str, str]]:
    """Secret name -> key -> the operator's file (kustomization secretGenerator)."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    generated: dict[str, dict[str, str]] = {}
    for generator in kustomization["secretGenerator"]:
        assert set(generator) == {"name", "files"}, "files only: no literals, no placeholders"
        generated[generator["name"]] = dict(f.split("=", 1) for f in generator["files"])
    return generated


def secret_ref(workload: dict[str, Any], variable: str) -> tuple[str, str]:
    env = {e["name"]: e for e in container(workload)["env"]}
    reference = env[variable]["valueFrom"]["secretKeyRef"]
    return reference["name"], reference["key"]


def test_no_secret_or_placeholder_is_applied_by_the_kustomization() -> None:
    assert not [d for d in all_documents() if d["kind"] == "Secret"]
    text = "\n".join(p.read_text() for p in DEPLOY.glob("*.yaml"))
    assert "CHANGE-ME" not in text and "stringData" not in text
    ignored = (DEPLOY / "secrets" / ".gitignore").read_text().splitlines()
    assert "*" in ignored  # the operator's files never enter the repository
    for keys in generated_secrets().values():
        for file in keys.values():
            assert file.startswith("secrets/") and not (DEPLOY / file).exists()
    readme = (DEPLOY / "secrets" / "README.md").read_text()
    assert all(
        file.removeprefix("secrets/") in readme
        for k in generated_secrets().values()
        for file in k.values()
    )


@pytest.mark.parametrize(
    ("kind", "name", "variable", "secret"),
    [
        ("Deployment", "trainscaler-flower", "FLOWER_BASIC_AUTH", ("trainscaler-flower", "basic-auth")),
        ("Deployment", "trainscaler-api", "TRAINSCALER_API_TOKEN", ("trainscaler-api", "token")),
        ("StatefulSet", "trainscaler-redis", "REDIS_PASSWORD", ("trainscaler-redis", "password")),
        *(
            ("Deployment", f"trainscaler-{name}", "TRAINSCALER_REDIS_PASSWORD", ("trainscaler-redis", "password"))
            for name in REDIS_CLIENTS
        ),
    ],
)  # fmt: skip
def test_secrets_come_from_generated_secrets(
    kind: str, name: str, variable: str, secret: tuple[str, str]
) -> None:
    assert secret_ref(find(kind, name), variable) == secret
    assert secret[1] in generated_secrets()[secret[0]]


@pytest.mark.parametrize("name", REDIS_CLIENTS)
def test_the_redis_url_holds_no_password(name: str) -> None:
    # The password (any characters) is URL-encoded into the URL by Settings.
    env = {e["name"]: e for e in container(find("Deployment", f"trainscaler-{name}"))["env"]}
    assert env["TRAINSCALER_REDIS_URL"]["value"] == "redis://trainscaler-redis:6379/0"


def test_api_serves_on_port_8000() -> None:
    api = find("Deployment", "trainscaler-api")
    main = container(api)
    assert main["command"][:2] == ["trainscaler", "api"]
    assert [p["containerPort"] for p in main["ports"]] == [8000]
    assert find("Service", "trainscaler-api")["spec"]["ports"][0]["port"] == 8000


def test_redis_is_persistent_and_password_protected() -> None:
    redis = find("StatefulSet", "trainscaler-redis")
    main = container(redis)
    assert "--appendonly yes" in " ".join(main["args"])
    assert '--requirepass "$REDIS_PASSWORD"' in " ".join(main["args"])
    assert "--appendfsync always" in " ".join(
        main["args"]
    )  # an acknowledged write survives a crash
    claims = redis["spec"]["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == ["data"]
    assert {"name": "data", "mountPath": "/data"} in main["volumeMounts"]
    service = find("Service", "trainscaler-redis")
    assert from_label_selector({"matchLabels": service["spec"]["selector"]}).matches(
        pod_labels(redis)
    )


@pytest.mark.parametrize("role", ROLES)
def test_each_role_has_its_own_pdb(role: str) -> None:
    pdb = find("PodDisruptionBudget", f"trainscaler-{role}")
    selector = from_label_selector(pdb["spec"]["selector"])
    assert selector.matches(pod_labels(find("Deployment", f"trainscaler-{role}")))
    for other in [*ROLES, "beat", "api"]:
        if other != role:
            assert not selector.matches(pod_labels(find("Deployment", f"trainscaler-{other}")))
    if role == "planner":
        # The standby may be unready; one pod at a time still goes.
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    else:
        assert pdb["spec"]["minAvailable"] == 1


def test_every_deployment_with_more_than_one_replica_has_a_pdb() -> None:
    budgets = [
        from_label_selector(d["spec"]["selector"])
        for d in all_documents()
        if d["kind"] == "PodDisruptionBudget"
    ]
    for doc in all_documents():
        if (
            doc["kind"] == "Deployment"
            and doc["spec"]["replicas"] > 1
            and doc["metadata"]["name"] != "trainscaler-beat"
        ):
            assert any(b.matches(pod_labels(doc)) for b in budgets), doc["metadata"]["name"]


def test_only_trainscaler_pods_reach_redis() -> None:
    redis_pods = pod_labels(find("StatefulSet", "trainscaler-redis"))
    policies = [
        d
        for d in all_documents()
        if d["kind"] == "NetworkPolicy"
        and from_label_selector(d["spec"]["podSelector"]).matches(redis_pods)
    ]
    ingress_policies = [p for p in policies if "Ingress" in p["spec"]["policyTypes"]]
    assert ingress_policies, "no ingress policy isolates Redis"
    peers = [
        from_label_selector(peer["podSelector"])
        for policy in ingress_policies
        for rule in policy["spec"].get("ingress", [])
        for peer in rule["from"]
    ]

    def allowed(labels: dict[str, str]) -> bool:
        return any(peer.matches(labels) for peer in peers)

    for name in REDIS_CLIENTS:
        assert allowed(pod_labels(find("Deployment", f"trainscaler-{name}"))), name
    assert not allowed({"app": "training-job"})
    assert not allowed({"app.kubernetes.io/name": "trainscaler"})
    # No namespaceSelector or ipBlock peers: other namespaces stay out.
    for policy in ingress_policies:
        for rule in policy["spec"].get("ingress", []):
            assert all(set(peer) == {"podSelector"} for peer in rule["from"])


def test_the_packing_scheduler_profile_scores_most_allocated_gpus_first() -> None:
    config = yaml.safe_load((DEPLOY / "scheduler" / "kube-scheduler-config.yaml").read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "trainscaler-packing"
    disabled = {p["name"] for p in profile["plugins"]["score"]["disabled"]}
    assert disabled == {"NodeResourcesBalancedAllocation", "PodTopologySpread"}
    (fit,) = [c for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    strategy = fit["args"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights["nvidia.com/gpu"] > max(weights["cpu"], weights["memory"])


# --- the KubeML listener ---------------------------------------------------------------------

KUBEML_NAMESPACE = {"kubernetes.io/metadata.name": "kubeml"}


def _opens_the_kubeml_listener(workload: dict[str, Any]) -> bool:
    spec = container(workload)
    env = {e["name"]: e.get("value") for e in spec.get("env", [])}
    return "kubeml-api" in spec.get("command", []) or env.get("TRAINSCALER_KUBEML_API_ENABLED") in (
        "true",
        "1",
    )


def _ingress_policies_of(labels: dict[str, str]) -> list[dict[str, Any]]:
    return [
        d
        for d in all_documents()
        if d["kind"] == "NetworkPolicy"
        and "Ingress" in d["spec"]["policyTypes"]
        and from_label_selector(d["spec"]["podSelector"]).matches(labels)
    ]


def _admits(
    policies: list[dict[str, Any]], pod: dict[str, str], namespace: dict[str, str], port: int
) -> bool:
    """NetworkPolicy semantics for one peer: namespaceSelector AND podSelector in one
    element; a policy-less port list admits every port."""
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = [p["port"] for p in rule.get("ports", [])]
            if ports and port not in ports:
                continue
            for peer in rule.get("from", []):
                if "ipBlock" in peer:
                    return True
                # Without a namespaceSelector a peer means the policy's own namespace.
                in_namespace = (
                    from_label_selector(peer["namespaceSelector"]).matches(namespace)
                    if "namespaceSelector" in peer
                    else namespace.get("kubernetes.io/metadata.name") == "trainscaler"
                )
                pod_ok = "podSelector" not in peer or from_label_selector(
                    peer["podSelector"]
                ).matches(pod)
                if in_namespace and pod_ok:
                    return True
    return False


def test_the_kubeml_listener_is_its_own_deployment_service_and_port() -> None:
    listener = find("Deployment", "trainscaler-kubeml-api")
    main = container(listener)
    assert main["command"][:2] == ["trainscaler", "kubeml-api"]
    assert [p["containerPort"] for p in main["ports"]] == [10200]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["TRAINSCALER_KUBEML_API_ENABLED"] == "true"
    assert env["TRAINSCALER_PS_URL"].startswith("http://")
    service = find("Service", "trainscaler-kubeml")
    selector = from_label_selector({"matchLabels": service["spec"]["selector"]})
    assert selector.matches(pod_labels(listener))
    assert not selector.matches(pod_labels(find("Deployment", "trainscaler-api")))
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(80, "kubeml")]
    # The token API stays as it was: its own port, never the KubeML listener.
    assert not _opens_the_kubeml_listener(find("Deployment", "trainscaler-api"))
    settings = find("ConfigMap", "trainscaler-settings")["data"]
    assert "TRAINSCALER_KUBEML_API_ENABLED" not in settings


def test_no_shipped_kubeml_listener_is_open_without_its_network_policy() -> None:
    listeners = [
        d for d in all_documents() if d["kind"] == "Deployment" and _opens_the_kubeml_listener(d)
    ]
    assert [d["metadata"]["name"] for d in listeners] == ["trainscaler-kubeml-api"]
    kubeml_ns = KUBEML_NAMESPACE
    other_ns = {"kubernetes.io/metadata.name": "default"}
    own_ns = {"kubernetes.io/metadata.name": "trainscaler"}
    for workload in listeners:
        policies = _ingress_policies_of(pod_labels(workload))
        assert policies, f"{workload['metadata']['name']} has no ingress NetworkPolicy"
        for svc in ("controller", "parameter-server", "job"):
            assert _admits(policies, {"svc": svc}, kubeml_ns, 10200), svc
        # Not another port, not other KubeML-namespace pods, not other namespaces.
        assert not _admits(policies, {"svc": "controller"}, kubeml_ns, 8000)
        assert not _admits(policies, {"svc": "storage"}, kubeml_ns, 10200)
        assert not _admits(policies, {"app": "anything"}, kubeml_ns, 10200)
        assert not _admits(policies, {"svc": "controller"}, other_ns, 10200)
        for name in REDIS_CLIENTS:
            labels = pod_labels(find("Deployment", f"trainscaler-{name}"))
            assert not _admits(policies, labels, own_ns, 10200), name


def test_the_kubeml_listener_reaches_redis() -> None:
    labels = pod_labels(find("Deployment", "trainscaler-kubeml-api"))
    redis_pods = pod_labels(find("StatefulSet", "trainscaler-redis"))
    policies = _ingress_policies_of(redis_pods)
    own_ns = {"kubernetes.io/metadata.name": "trainscaler"}
    assert _admits(policies, labels, own_ns, 6379)
    assert not _admits(policies, {"svc": "controller"}, KUBEML_NAMESPACE, 6379)
