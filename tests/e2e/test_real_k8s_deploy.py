"""deploy/ against a real control plane (issue 17; ``--real-cluster`` only).

* ``kubectl apply --dry-run=server -k deploy/`` with the CRD installed, on a
  copy of deploy/ holding generated secret files (the repository ships none:
  without them the build fails): every manifest and the three generated
  Secrets pass the real server's validation and admission.
* Each role's own service account (planner, scale worker, event worker,
  API), asked as that account (impersonation): a SelfSubjectRulesReview lists
  exactly that role's ``ROLE_PERMISSIONS`` beyond what an account without
  bindings holds (nothing missing, nothing extra), plus, for the planner only,
  ``LEASE_PERMISSIONS`` in the trainscaler namespace; ``kubectl auth can-i
  --as`` answers yes for each of the role's permissions and no for the other
  roles' and for neighbours no role uses. The Lease's get and update hold for
  the planner's Lease by name and for no other Lease; create holds for any
  name (Kubernetes cannot limit create by resourceNames).
* The all-roles test account the end-to-end worker runs as holds the union.

The adapter's own requests as that account are checked by the end-to-end
tests on the real cluster (audit log: nothing denied, nothing outside the set).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.e2e.real_cluster import REPO, SERVICE_ACCOUNT, install_rbac
from workers.adapters.kubernetes.crd import install_crd
from workers.adapters.kubernetes.rbac import (
    LEASE_NAMED_VERBS,
    LEASE_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    ROLE_PERMISSIONS,
    Permission,
)
from workers.settings import Settings

pytestmark = pytest.mark.real_cluster

# A service account with no binding of its own: what every account holds anyway
# (self reviews, discovery, the cluster's default read grants).
BASELINE_ACCOUNT = "system:serviceaccount:trainscaler:no-bindings"
SECRET_FILES = ("redis-password", "flower-basic-auth", "api-token")
NEIGHBOURS = [
    Permission("apps", "deployments", "update"),
    Permission("apps", "deployments", "patch"),
    Permission("apps", "deployments", "delete"),
    Permission("apps", "deployments/scale", "patch"),
    Permission("", "pods", "get"),
    Permission("", "pods", "delete"),
    Permission("", "pods", "create"),
    Permission("", "nodes", "get"),
    Permission("", "nodes", "patch"),
    Permission("", "events", "update"),
    Permission("", "events", "list"),
    Permission("", "secrets", "get"),
    Permission("", "configmaps", "list"),
    Permission("batch", "jobs", "update"),
    Permission("batch", "jobs", "delete"),
    Permission("trainscaler.io", "elasticjobs", "update"),
    Permission("trainscaler.io", "elasticjobs", "patch"),
    Permission("trainscaler.io", "elasticjobs", "create"),
    Permission("trainscaler.io", "elasticjobs/status", "patch"),
    Permission("apiextensions.k8s.io", "customresourcedefinitions", "create"),
]


@pytest.fixture(name="admin", scope="module")
def admin_fixture(request: pytest.FixtureRequest) -> Iterator[k8s.ApiClient]:
    if not request.config.getoption("--real-cluster", default=False):
        pytest.skip("needs --real-cluster (scripts/test-real-k8s)")
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("--real-cluster needs KUBECONFIG")
    api = k8s_config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    install_crd(api)
    install_rbac(api)
    yield api
    api.close()


@pytest.fixture(name="kubectl", scope="module")
def kubectl_fixture() -> str:
    found = os.environ.get("TRAINSCALER_KUBECTL") or shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl binary")
    return found


def run_kubectl(kubectl: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, *args], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )


def test_kustomization_passes_server_side_dry_run(
    admin: k8s.ApiClient, kubectl: str, tmp_path: Path
) -> None:
    # No placeholder is shipped: without the operator's files the build fails.
    bare = tmp_path / "bare"
    shutil.copytree(REPO / "deploy", bare, ignore=shutil.ignore_patterns(*SECRET_FILES))
    refused = run_kubectl(kubectl, "kustomize", str(bare))
    assert refused.returncode != 0 and "secrets/" in refused.stderr, refused.stderr
    deploy = tmp_path / "deploy"
    shutil.copytree(REPO / "deploy", deploy, ignore=shutil.ignore_patterns(*SECRET_FILES))
    for name in SECRET_FILES:
        (deploy / "secrets" / name).write_text(
            "admin:p@ss/w:rd#?%" if "auth" in name else "p@ss/w:rd#?%"
        )
    done = run_kubectl(kubectl, "apply", "--dry-run=server", "-k", str(deploy))
    assert done.returncode == 0, done.stderr
    applied = [line for line in done.stdout.splitlines() if line.strip()]
    assert all(line.endswith("(server dry run)") for line in applied), done.stdout
    kinds = {line.split("/", 1)[0] for line in applied}
    assert {
        "namespace",
        "customresourcedefinition.apiextensions.k8s.io",
        "serviceaccount",
        "clusterrole.rbac.authorization.k8s.io",
        "clusterrolebinding.rbac.authorization.k8s.io",
        "deployment.apps",
        "secret",
    } <= kinds, kinds


def granted(
    admin: k8s.ApiClient, namespace: str, *, user: str = SERVICE_ACCOUNT
) -> set[Permission]:
    """Every (group, resource, verb) ``user`` holds in ``namespace``."""
    review: Any = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    api = k8s.ApiClient(admin.configuration)
    # Impersonating a service account's name brings its groups along.
    api.set_default_header("Impersonate-User", user)
    try:
        answer: Any = k8s.AuthorizationV1Api(api).create_self_subject_rules_review(review)
    finally:
        api.close()
    assert not answer.status.incomplete, answer.status.evaluation_error
    found = set()
    for rule in answer.status.resource_rules:
        for group in rule.api_groups or []:
            for resource in rule.resources or []:
                for verb in rule.verbs:
                    found.add(Permission(group, resource, verb))
    return found


ROLE_ACCOUNTS = {
    role: f"system:serviceaccount:trainscaler:trainscaler-{role}" for role in ROLE_PERMISSIONS
}
LEASE_NAME = Settings.model_fields["planner_lease_name"].default


@pytest.mark.parametrize("role", list(ROLE_PERMISSIONS))
def test_each_roles_account_holds_exactly_its_permissions(admin: k8s.ApiClient, role: str) -> None:
    expected = set(ROLE_PERMISSIONS[role])
    lease = set(LEASE_PERMISSIONS) if role == "planner" else set()
    for namespace, permissions in {"default": expected, "trainscaler": expected | lease}.items():
        baseline = granted(admin, namespace, user=BASELINE_ACCOUNT)
        assert not baseline & permissions, baseline & permissions
        held = granted(admin, namespace, user=ROLE_ACCOUNTS[role]) - baseline
        assert held == permissions, (role, namespace, held ^ permissions)


def test_the_all_roles_test_account_holds_the_union(admin: k8s.ApiClient) -> None:
    expected = {
        "default": set(REQUIRED_PERMISSIONS),
        "trainscaler": set(REQUIRED_PERMISSIONS | LEASE_PERMISSIONS),
    }
    for namespace, permissions in expected.items():
        baseline = granted(admin, namespace, user=BASELINE_ACCOUNT)
        assert granted(admin, namespace) - baseline == permissions, namespace


def can_i(
    kubectl: str, permission: Permission, *, user: str, namespace: str | None = None, name: str = ""
) -> bool:
    resource, _, subresource = permission.resource.partition("/")
    target = f"{resource}.{permission.api_group}" if permission.api_group else resource
    if name:
        target = f"{target}/{name}"
    where = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    args = ["auth", "can-i", permission.verb, target, *where, "--as", user]
    if subresource:
        args.append(f"--subresource={subresource}")
    done = run_kubectl(kubectl, *args)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), (args, done.stdout, done.stderr)
    return answer == "yes"


@pytest.mark.parametrize("role", list(ROLE_PERMISSIONS))
def test_kubectl_auth_can_i_as_each_roles_account(
    admin: k8s.ApiClient, kubectl: str, role: str
) -> None:
    user = ROLE_ACCOUNTS[role]
    own = ROLE_PERMISSIONS[role]
    refused = sorted(p for p in own if not can_i(kubectl, p, user=user))
    assert refused == []
    others = set(REQUIRED_PERMISSIONS) - own
    allowed = [p for p in sorted(others | set(NEIGHBOURS)) if can_i(kubectl, p, user=user)]
    assert allowed == []


def test_the_planner_lease_is_granted_by_name_in_its_namespace_only(
    admin: k8s.ApiClient, kubectl: str
) -> None:
    planner = ROLE_ACCOUNTS["planner"]
    for permission in sorted(LEASE_PERMISSIONS):
        name = LEASE_NAME if permission.verb in LEASE_NAMED_VERBS else ""
        assert can_i(kubectl, permission, user=planner, namespace="trainscaler", name=name)
        assert not can_i(kubectl, permission, user=planner, namespace="default", name=name)
    for verb in sorted(LEASE_NAMED_VERBS):
        lease = Permission("coordination.k8s.io", "leases", verb)
        # Another Lease in the same namespace (another component's election): no.
        assert not can_i(kubectl, lease, user=planner, namespace="trainscaler", name="kube-other")
    for verb in ("delete", "list", "watch", "patch"):
        lease = Permission("coordination.k8s.io", "leases", verb)
        assert not can_i(kubectl, lease, user=planner, namespace="trainscaler"), verb
    for role in ("scale-worker", "event-worker", "api"):
        for permission in sorted(LEASE_PERMISSIONS):
            assert not can_i(
                kubectl,
                permission,
                user=ROLE_ACCOUNTS[role],
                namespace="trainscaler",
                name=LEASE_NAME,
            ), (role, permission)


def test_pinned_kubectl_matches_the_server(admin: k8s.ApiClient, kubectl: str) -> None:
    """scripts/test-real-k8s puts the pinned build's kubectl first on PATH."""
    done = run_kubectl(kubectl, "version", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert '"gitVersion": "v1.37.2"' in done.stdout, done.stdout
    assert Path(kubectl).exists()
