"""The real control plane (``scripts/real-k8s``) as the end-to-end tests see it.

* ``AuditLog``: kube-apiserver's audit log of the ``trainscaler`` namespace's
  service accounts, read as (verb, resource) counts like the loopback server's
  request counter, from a chosen offset on. The worker runs as that account,
  so the counts are its requests only (the test's own reads are an admin's).
* ``install_rbac``: deploy/'s namespace, per-role accounts, ClusterRoles and
  the planner's Lease Role applied, plus a test-only account
  (``trainscaler/trainscaler-all-roles``) bound to each worker role's shipped
  ClusterRole: the end-to-end worker consumes every queue (planner, scale and
  event work in one process), so it holds exactly the union of the deployed
  roles' rights, and any request outside them is denied.
* ``service_account_kubeconfig``: a TokenRequest for that account and a
  kubeconfig with the token.
* ``fresh_namespace``: the test's namespace deleted (waiting until it is
  gone) and created again.
* ``list_objects``: an admin's LIST of one resource in a namespace.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from workers.adapters.kubernetes.client import KubeClient

REPO = Path(__file__).resolve().parents[2]
ALL_ROLES_ACCOUNT = "trainscaler-all-roles"
SERVICE_ACCOUNT = f"system:serviceaccount:trainscaler:{ALL_ROLES_ACCOUNT}"
# The worker roles whose shipped ClusterRoles the all-in-one worker needs.
WORKER_ROLES = ("planner", "scale-worker", "event-worker")
RESOURCE_PATHS = {
    "pods": ("", "v1", "pods"),
    "events": ("", "v1", "events"),
    "deployments.apps": ("apps", "v1", "deployments"),
    "statefulsets.apps": ("apps", "v1", "statefulsets"),
    "jobs.batch": ("batch", "v1", "jobs"),
    "elasticjobs.trainscaler.io": ("trainscaler.io", "v1alpha1", "elasticjobs"),
}


def audit_log_path() -> Path:
    """``scripts/real-k8s`` keeps the audit log beside the admin kubeconfig."""
    explicit = os.environ.get("TRAINSCALER_REAL_K8S_AUDIT_LOG")
    if explicit:
        return Path(explicit)
    return Path(os.environ["KUBECONFIG"]).resolve().parent / "audit.log"


class AuditLog:
    """Requests of one user, by (verb, resource[/subresource]), since ``reset``."""

    def __init__(self, path: Path, *, user: str = SERVICE_ACCOUNT) -> None:
        self.path = path
        self.user = user
        self._offset = 0
        self.reset()

    def reset(self) -> None:
        self._offset = self.path.stat().st_size if self.path.exists() else 0

    def events(self) -> list[dict[str, Any]]:
        """One audit event per request (its last stage), in order."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self._offset)
            lines = log.read().splitlines()
        latest: dict[str, dict[str, Any]] = {}
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if (event.get("user") or {}).get("username") != self.user:
                continue
            latest[event["auditID"]] = event
        return list(latest.values())

    def counts(self) -> dict[tuple[str, str], int]:
        found: Counter[tuple[str, str]] = Counter()
        for event in self.events():
            found[(event["verb"], resource_of(event))] += 1
        return dict(found)

    def denied(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if (e.get("responseStatus") or {}).get("code") == 403]


def resource_of(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    if not ref:
        return str(event.get("requestURI", "")).split("?")[0]
    resource = str(ref.get("resource", ""))
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    return resource


def permissions_used(events: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) of each resource request."""
    used = set()
    for event in events:
        ref = event.get("objectRef")
        if ref:
            used.add((str(ref.get("apiGroup", "")), resource_of(event), str(event["verb"])))
    return used


def apply_manifest(api: k8s.ApiClient, document: dict[str, Any]) -> None:
    """Create or replace one namespace, service account or RBAC object (cluster or namespaced)."""
    core: Any = k8s.CoreV1Api(api)
    rbac: Any = k8s.RbacAuthorizationV1Api(api)
    kind, name = document["kind"], document["metadata"]["name"]
    namespace = document["metadata"].get("namespace")
    creators: dict[str, tuple[Any, Any]] = {
        "Namespace": (core.create_namespace, None),
        "ServiceAccount": (core.create_namespaced_service_account, None),
        "ClusterRole": (rbac.create_cluster_role, rbac.replace_cluster_role),
        "ClusterRoleBinding": (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding),
        "Role": (rbac.create_namespaced_role, rbac.replace_namespaced_role),
        "RoleBinding": (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding),
    }
    create, replace = creators[kind]
    try:
        if namespace:
            create(namespace, document)
        else:
            create(document)
    except k8s.ApiException as error:
        if error.status != 409:
            raise
        if replace is not None and namespace:
            replace(name, namespace, document)
        elif replace is not None:
            replace(name, document)


def _binding(kind: str, role: str, role_kind: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{ALL_ROLES_ACCOUNT}-{role}"}
    if kind == "RoleBinding":
        metadata["namespace"] = "trainscaler"
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [
            {"kind": "ServiceAccount", "name": ALL_ROLES_ACCOUNT, "namespace": "trainscaler"}
        ],
    }


def install_rbac(api: k8s.ApiClient) -> None:
    for manifest in ("namespace.yaml", "serviceaccounts.yaml", "rbac.yaml", "leader-election.yaml"):
        for document in yaml.safe_load_all((REPO / "deploy" / manifest).read_text()):
            if document:
                apply_manifest(api, document)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": ALL_ROLES_ACCOUNT, "namespace": "trainscaler"},
    }
    apply_manifest(api, account)
    for role in WORKER_ROLES:
        apply_manifest(api, _binding("ClusterRoleBinding", f"trainscaler-{role}", "ClusterRole"))
    apply_manifest(api, _binding("RoleBinding", "trainscaler-planner-lease", "Role"))


def service_account_kubeconfig(api: k8s.ApiClient, path: Path) -> Path:
    """A kubeconfig holding a fresh token of the all-roles test account."""
    install_rbac(api)
    core = k8s.CoreV1Api(api)
    request: Any = {"spec": {"expirationSeconds": 3600, "audiences": []}}
    answer: Any = core.create_namespaced_service_account_token(
        ALL_ROLES_ACCOUNT, "trainscaler", request
    )
    token = answer.status.token
    configuration = api.configuration
    cluster = {"server": configuration.host, "certificate-authority": configuration.ssl_ca_cert}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real-k8s", "cluster": cluster}],
        "users": [{"name": "trainscaler", "user": {"token": token}}],
        "contexts": [
            {"name": "trainscaler", "context": {"cluster": "real-k8s", "user": "trainscaler"}}
        ],
        "current-context": "trainscaler",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))
    return path


def fresh_namespace(api: k8s.ApiClient, name: str, *, timeout: float = 120.0) -> None:
    core = k8s.CoreV1Api(api)
    delete_namespace(api, name, timeout=timeout)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))


def delete_namespace(api: k8s.ApiClient, name: str, *, timeout: float = 120.0) -> None:
    core = k8s.CoreV1Api(api)
    try:
        core.delete_namespace(name, propagation_policy="Foreground")
    except k8s.ApiException as error:
        if error.status != 404:
            raise
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespace(name)
        except k8s.ApiException as error:
            if error.status == 404:
                return
            raise
        time.sleep(0.5)
    raise AssertionError(f"namespace {name} still there after {timeout}s")


def list_objects(api: k8s.ApiClient, storage: str, namespace: str) -> list[dict[str, Any]]:
    """Every object of ``storage`` (the loopback store's name) in ``namespace``."""
    group, version, plural = RESOURCE_PATHS[storage]
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    document = KubeClient(api).request("GET", f"{prefix}/namespaces/{namespace}/{plural}")
    kind = document.get("kind", "").removesuffix("List")
    items: list[dict[str, Any]] = document.get("items") or []
    for item in items:  # a LIST's items carry neither kind nor apiVersion
        item.setdefault("kind", kind)
    return items
