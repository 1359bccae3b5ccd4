"""Every (apiGroup, resource, verb) each role's requests need, and nothing more.

Each role runs as its own ServiceAccount with only what its code path asks
for (issue 16, least privilege per role):

* planner (``control``: autoscale, finish, lease sweep): the list-and-watch
  cache (``cache.py``), ``finish``'s targeted listing (``direct.py``), and its
  Lease (``lease.py``, a Role in trainscaler's own namespace);
* scale workers (``cluster-writes``: scale): ``scaler.py`` and ``events.py``;
* event workers (``events``: submit, report_epoch, schedule) and the HTTP API
  (``GET /jobs``, submissions): ``direct.py``, paged LISTs and one GET.

``deploy/rbac.yaml`` grants each account exactly its set (a unit test checks
it against its own list), and the integration tests check that the requests
each path really makes against the loopback API server stay inside its set.

Custom resources behind ``/scale`` (Kubeflow PyTorchJob, Volcano Job...) are
per installation: grant ``get`` and ``update`` on ``<plural>/scale`` of their
group to the scale workers (and ``get`` to the planner, event workers and
API, which read their replica counts) in an extra Role (see docs/kubernetes.md).
"""

from __future__ import annotations

from typing import NamedTuple

from workers.adapters.kubernetes.crd import GROUP, PLURAL


class Permission(NamedTuple):
    api_group: str
    resource: str
    verb: str


def _grant(
    api_group: str, resources: tuple[str, ...], *, verbs: tuple[str, ...]
) -> set[Permission]:
    return {Permission(api_group, r, v) for r in resources for v in verbs}


_APPS_KINDS = ("deployments", "statefulsets", "replicasets")

PLANNER_PERMISSIONS: frozenset[Permission] = frozenset(
    # cache.py: one LIST then WATCH per kind (capacity, scale targets, ElasticJobs);
    # finish's direct.py listing needs nothing more.
    _grant("", ("nodes", "pods"), verbs=("list", "watch"))
    | _grant("apps", _APPS_KINDS, verbs=("list", "watch"))
    | _grant("batch", ("jobs",), verbs=("list", "watch"))
    | _grant(GROUP, (PLURAL,), verbs=("list", "watch"))
)

SCALE_WORKER_PERMISSIONS: frozenset[Permission] = frozenset(
    # scaler.py: read the job when the planner sent no copy or after a 409, then
    # write its status through /status only.
    _grant(GROUP, (PLURAL,), verbs=("get",))
    | _grant(GROUP, (f"{PLURAL}/status",), verbs=("update",))
    # scaler.py: Scale read and replaced with its resourceVersion as precondition.
    | _grant("apps", tuple(f"{kind}/scale" for kind in _APPS_KINDS), verbs=("get", "update"))
    # scaler.py: batch/v1 Jobs through spec.parallelism (merge patch).
    | _grant("batch", ("jobs",), verbs=("get", "patch"))
    # events.py: ScaledUp / ScaledDown / ScaleFailed on the ElasticJob.
    | _grant("", ("events",), verbs=("create",))
)

EVENT_WORKER_PERMISSIONS: frozenset[Permission] = frozenset(
    # direct.py: elastic_jobs (paged LISTs of ElasticJobs and the built-in kinds
    # they target), has_elastic_job (submit's one GET) and look_up (schedule's one
    # GET per job, a LIST of one name for its target). No watch, no cache.
    _grant(GROUP, (PLURAL,), verbs=("get", "list"))
    | _grant("apps", _APPS_KINDS, verbs=("list",))
    | _grant("batch", ("jobs",), verbs=("list",))
)

# The HTTP API reads through the same uncached reader (``GET /jobs``, a
# submission's target check); ``GET /health`` asks ``/version`` (a non-resource
# URL every account may read). No scale, status, event or watch rights.
API_PERMISSIONS: frozenset[Permission] = EVENT_WORKER_PERMISSIONS

ROLE_PERMISSIONS: dict[str, frozenset[Permission]] = {
    "planner": PLANNER_PERMISSIONS,
    "scale-worker": SCALE_WORKER_PERMISSIONS,
    "event-worker": EVENT_WORKER_PERMISSIONS,
    "api": API_PERMISSIONS,
}

# One worker consuming every queue (``celery -A workers worker`` as the
# end-to-end tests and a single-process setup run it) needs the union.
REQUIRED_PERMISSIONS: frozenset[Permission] = (
    PLANNER_PERMISSIONS | SCALE_WORKER_PERMISSIONS | EVENT_WORKER_PERMISSIONS
)

# The planner's leader election, one coordination.k8s.io Lease in trainscaler's
# own namespace: a Role there, never cluster-wide (deploy/leader-election.yaml).
# get and update name the Lease (``resourceNames``); create cannot: a POST's
# URL has no name (it is in the body), so Kubernetes never matches resourceNames
# on create.
LEASE_PERMISSIONS: frozenset[Permission] = frozenset(
    _grant("coordination.k8s.io", ("leases",), verbs=("get", "create", "update"))
)
LEASE_NAMED_VERBS: frozenset[str] = frozenset({"get", "update"})

# Capacity is cluster-wide (every node, every live pod uses it): read-only, the
# planner's only cluster-scoped grant in the namespaced alternative.
CLUSTER_READ_PERMISSIONS: frozenset[Permission] = frozenset(
    _grant("", ("nodes", "pods"), verbs=("list", "watch"))
)

# Everything else is per namespace: with ``TRAINSCALER_NAMESPACES`` set, a Role
# per role with these in each listed namespace (deploy/namespaced/rbac-namespaced.yaml).
NAMESPACED_PERMISSIONS: frozenset[Permission] = REQUIRED_PERMISSIONS - CLUSTER_READ_PERMISSIONS
