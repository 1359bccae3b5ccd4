"""deploy/ against a real control plane (issue 17; ``--real-cluster`` only).

* ``kubectl apply --dry-run=server -k deploy/`` with the CRD installed, on a
  copy of deploy/ holding generated secret files (the repository ships none:
  without them the build fails): every manifest and the three generated
  Secrets pass the real server's validation and admission.
* The ``trainscaler`` service account's rights, asked as that account
  (impersonation): a SelfSubjectRulesReview lists exactly
  ``REQUIRED_PERMISSIONS`` beyond what an account without bindings holds
  (nothing missing, nothing extra), plus ``LEASE_PERMISSIONS`` (the planner's
  leader election) in the trainscaler namespace only, and ``kubectl auth can-i --as`` answers yes for each
  required permission and no for neighbours the adapter never uses. The API's
  own account, ``trainscaler-api``, holds exactly ``API_PERMISSIONS``: no
  scale, status or event rights.

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
    API_PERMISSIONS,
    LEASE_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    Permission,
)

pytestmark = pytest.mark.real_cluster

# A service account with no binding of its own: what every account holds anyway
# (self reviews, discovery, the cluster's default read grants).
BASELINE_ACCOUNT = "system:serviceaccount:trainscaler:no-bindings"
API_ACCOUNT = "system:serviceaccount:trainscaler:trainscaler-api"
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


def test_service_account_holds_exactly_the_adapters_permissions(admin: k8s.ApiClient) -> None:
    expected = {
        "default": set(REQUIRED_PERMISSIONS),
        "trainscaler": set(REQUIRED_PERMISSIONS | LEASE_PERMISSIONS),
    }
    for namespace, permissions in expected.items():
        baseline = granted(admin, namespace, user=BASELINE_ACCOUNT)
        assert not baseline & permissions, baseline & permissions
        assert granted(admin, namespace) - baseline == permissions, namespace


def test_the_api_account_holds_exactly_read_permissions(admin: k8s.ApiClient) -> None:
    for namespace in ("default", "trainscaler"):
        baseline = granted(admin, namespace, user=BASELINE_ACCOUNT)
        assert granted(admin, namespace, user=API_ACCOUNT) - baseline == set(API_PERMISSIONS)


def can_i(kubectl: str, permission: Permission, *, namespace: str | None = None) -> bool:
    resource, _, subresource = permission.resource.partition("/")
    target = f"{resource}.{permission.api_group}" if permission.api_group else resource
    where = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    args = ["auth", "can-i", permission.verb, target, *where, "--as", SERVICE_ACCOUNT]
    if subresource:
        args.append(f"--subresource={subresource}")
    done = run_kubectl(kubectl, *args)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), (args, done.stdout, done.stderr)
    return answer == "yes"


def test_kubectl_auth_can_i_as_the_service_account(admin: k8s.ApiClient, kubectl: str) -> None:
    refused = sorted(p for p in REQUIRED_PERMISSIONS if not can_i(kubectl, p))
    assert refused == []
    allowed = [p for p in NEIGHBOURS if can_i(kubectl, p)]
    assert allowed == []


def test_the_planner_lease_is_granted_in_its_namespace_only(
    admin: k8s.ApiClient, kubectl: str
) -> None:
    for permission in sorted(LEASE_PERMISSIONS):
        assert can_i(kubectl, permission, namespace="trainscaler"), permission
        assert not can_i(kubectl, permission, namespace="default"), permission
    for verb in ("delete", "list", "watch", "patch"):
        lease = Permission("coordination.k8s.io", "leases", verb)
        assert not can_i(kubectl, lease, namespace="trainscaler"), verb


def test_pinned_kubectl_matches_the_server(admin: k8s.ApiClient, kubectl: str) -> None:
    """scripts/test-real-k8s puts the pinned build's kubectl first on PATH."""
    done = run_kubectl(kubectl, "version", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert '"gitVersion": "v1.37.2"' in done.stdout, done.stdout
    assert Path(kubectl).exists()
