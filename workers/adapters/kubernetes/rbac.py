"""Every (apiGroup, resource, verb) the adapter's requests need, and nothing more.

``deploy/rbac.yaml``'s ClusterRole must grant exactly this set (a unit test
checks it), and the integration test checks that the requests the adapter
really makes against the loopback API server stay inside it.

Custom resources behind ``/scale`` (Kubeflow PyTorchJob, Volcano Job...) are
per installation: grant ``get`` and ``update`` on ``<plural>/scale`` of their
group in an extra Role (see docs/kubernetes.md).
"""

from __future__ import annotations

from typing import NamedTuple

from workers.adapters.kubernetes.crd import GROUP, PLURAL


class Permission(NamedTuple):
    api_group: str
    resource: str
    verb: str


def _grant(api_group: str, resources: tuple[str, ...], verbs: tuple[str, ...]) -> set[Permission]:
    return {Permission(api_group, r, v) for r in resources for v in verbs}


REQUIRED_PERMISSIONS: frozenset[Permission] = frozenset(
    # cache.py: one LIST then WATCH per kind.
    _grant("", ("nodes", "pods"), ("list", "watch"))
    | _grant("apps", ("deployments", "statefulsets", "replicasets"), ("list", "watch"))
    | _grant("batch", ("jobs",), ("list", "watch"))
    | _grant(GROUP, (PLURAL,), ("list", "watch"))
    # scaler.py: read the job when not cached or after a 409, then write its status.
    | _grant(GROUP, (PLURAL,), ("get",))
    | _grant(GROUP, (f"{PLURAL}/status",), ("update",))
    # scaler.py: Scale read and replaced with its resourceVersion as precondition.
    | _grant(
        "apps", ("deployments/scale", "statefulsets/scale", "replicasets/scale"), ("get", "update")
    )
    # scaler.py: batch/v1 Jobs through spec.parallelism (merge patch).
    | _grant("batch", ("jobs",), ("get", "patch"))
    # events.py
    | _grant("", ("events",), ("create",))
)

# DEPLOY (issue 16): the planner's leader election, one coordination.k8s.io Lease
# in trainscaler's own namespace: a Role there, never cluster-wide
# (deploy/leader-election.yaml; a unit test keeps them equal).
LEASE_PERMISSIONS: frozenset[Permission] = frozenset(
    _grant("coordination.k8s.io", ("leases",), ("get", "create", "update"))
)

# Capacity is cluster-wide (every node, every live pod uses it): read-only, and
# the only cluster-scoped grant the namespaced alternative keeps.
CLUSTER_READ_PERMISSIONS: frozenset[Permission] = frozenset(
    _grant("", ("nodes", "pods"), ("list", "watch"))
)

# Everything else is per namespace: with ``TRAINSCALER_NAMESPACES`` set, a Role
# with these in each listed namespace (deploy/namespaced/rbac-namespaced.yaml).
NAMESPACED_PERMISSIONS: frozenset[Permission] = REQUIRED_PERMISSIONS - CLUSTER_READ_PERMISSIONS

# The HTTP API only reads (``GET /jobs`` lists ElasticJobs, ``GET /health``): its own
# ServiceAccount gets the read verbs and no scale, status or event rights.
API_PERMISSIONS: frozenset[Permission] = frozenset(
    p
    for p in REQUIRED_PERMISSIONS
    if p.verb in {"get", "list", "watch"} and "/" not in p.resource  # no subresources
)
