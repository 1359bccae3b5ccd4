"""deploy/rbac-planner-lease.yaml grants the planner's leader election exactly
what ``lease.py`` does, on its one Lease, in trainscaler's namespace only."""

from __future__ import annotations

from pathlib import Path

import yaml

from workers.adapters.kubernetes.rbac import LEASE_PERMISSIONS, Permission
from workers.settings import Settings

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "rbac-planner-lease.yaml"


def test_the_lease_role_grants_exactly_what_leader_election_uses() -> None:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    role = next(d for d in docs if d["kind"] == "Role")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    granted = set()
    for rule in role["rules"]:
        names = rule.get("resourceNames")
        for verb in rule["verbs"]:
            # Reading and renewing only the planner's Lease; create cannot be named.
            assert names == ([Settings().planner_lease_name] if verb != "create" else None)
            granted |= {
                Permission(g, r, verb) for g in rule["apiGroups"] for r in rule["resources"]
            }
    assert granted == set(LEASE_PERMISSIONS)
    # A Role (namespaced), never a ClusterRole: leases elsewhere stay out of reach.
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainscaler", "namespace": "trainscaler"}
    ]
