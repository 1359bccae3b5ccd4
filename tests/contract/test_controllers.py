"""Simulated controllers, observed through the API: Deployments own a
ReplicaSet that owns pods, scale both ways, cascade on delete; StatefulSets
use ordinals; Jobs run ``parallelism`` pods."""

from __future__ import annotations

from .conftest import deployment_manifest, pod_manifest, statefulset_manifest


def _pods(core, namespace, *, selector):
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def _active(pods):
    return [pod for pod in pods if pod.metadata.deletion_timestamp is None]


def test_deployment_creates_replicaset_and_pods(cluster, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("web", replicas=3))
    cluster.wait_for(
        lambda: (apps.read_namespaced_deployment("web", namespace).status.ready_replicas or 0) == 3,
        what="3 ready replicas",
    )
    sets = apps.list_namespaced_replica_set(namespace, label_selector="app=web").items
    assert len(sets) == 1
    owner = sets[0].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Deployment", "web", True)
    assert "pod-template-hash" in sets[0].metadata.labels
    pods = _active(_pods(core, namespace, selector="app=web"))
    assert len(pods) == 3
    assert all(pod.metadata.owner_references[0].name == sets[0].metadata.name for pod in pods)
    assert all(pod.metadata.name.startswith(f"{sets[0].metadata.name}-") for pod in pods)
    status = apps.read_namespaced_deployment("web", namespace).status
    assert (status.replicas, status.updated_replicas, status.available_replicas) == (3, 3, 3)
    assert status.observed_generation == 1


def test_deployment_scales_down_and_up(cluster, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("scale", replicas=4))
    cluster.wait_for(
        lambda: len(_active(_pods(core, namespace, selector="app=scale"))) == 4, what="4 pods"
    )
    apps.patch_namespaced_deployment_scale("scale", namespace, {"spec": {"replicas": 1}})
    cluster.wait_for(
        lambda: len(_active(_pods(core, namespace, selector="app=scale"))) == 1, what="1 pod"
    )
    apps.patch_namespaced_deployment_scale("scale", namespace, {"spec": {"replicas": 2}})
    cluster.wait_for(
        lambda: (
            (apps.read_namespaced_deployment("scale", namespace).status.ready_replicas or 0) == 2
        ),
        what="2 ready replicas",
    )
    status = apps.read_namespaced_deployment("scale", namespace).status
    assert status.observed_generation == 3


def test_deleted_pod_is_replaced(cluster, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("heal", replicas=2))
    first = cluster.wait_for(
        lambda: len(pods := _active(_pods(core, namespace, selector="app=heal"))) == 2 and pods,
        what="2 pods",
    )
    victim = first[0].metadata.name
    core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
    cluster.wait_for(
        lambda: (
            len(
                names := {
                    p.metadata.name for p in _active(_pods(core, namespace, selector="app=heal"))
                }
            )
            == 2
            and victim not in names
        ),
        what="a replacement pod",
    )


def test_deleting_a_deployment_cascades(cluster, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("gone", replicas=2))
    cluster.wait_for(lambda: len(_pods(core, namespace, selector="app=gone")) == 2, what="2 pods")
    apps.delete_namespaced_deployment("gone", namespace, propagation_policy="Foreground")
    cluster.wait_for(
        lambda: not apps.list_namespaced_replica_set(namespace, label_selector="app=gone").items,
        what="the replicaset to be collected",
    )
    cluster.wait_for(
        lambda: not _pods(core, namespace, selector="app=gone"), what="the pods to be collected"
    )


def test_statefulset_uses_ordinals_and_removes_highest_first(cluster, apps, core, namespace):
    apps.create_namespaced_stateful_set(
        namespace, statefulset_manifest("db", replicas=3, parallel=False)
    )
    cluster.wait_for(
        lambda: (
            (apps.read_namespaced_stateful_set("db", namespace).status.ready_replicas or 0) == 3
        ),
        what="3 ready stateful pods",
    )
    names = sorted(pod.metadata.name for pod in _pods(core, namespace, selector="app=db"))
    assert names == ["db-0", "db-1", "db-2"]
    apps.patch_namespaced_stateful_set_scale("db", namespace, {"spec": {"replicas": 1}})
    cluster.wait_for(
        lambda: (
            sorted(p.metadata.name for p in _pods(core, namespace, selector="app=db")) == ["db-0"]
        ),
        what="only db-0 to remain",
    )


def test_job_runs_parallelism_pods(cluster, batch, core, namespace):
    template = {"spec": {**pod_manifest("job")["spec"], "restartPolicy": "Never"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"parallelism": 3, "completions": 10, "template": template},
    }
    batch.create_namespaced_job(namespace, job)
    cluster.wait_for(
        lambda: (batch.read_namespaced_job("train", namespace).status.active or 0) == 3,
        what="3 active job pods",
    )
    pods = _pods(core, namespace, selector="job-name=train")
    assert len(pods) == 3
    batch.patch_namespaced_job("train", namespace, {"spec": {"parallelism": 1}})
    cluster.wait_for(
        lambda: len(_active(_pods(core, namespace, selector="job-name=train"))) == 1,
        what="1 job pod",
    )


def test_template_change_rolls_to_a_new_replicaset(cluster, apps, core, namespace):
    apps.create_namespaced_deployment(namespace, deployment_manifest("roll", replicas=2))
    cluster.wait_for(
        lambda: (
            (apps.read_namespaced_deployment("roll", namespace).status.ready_replicas or 0) == 2
        ),
        what="2 ready replicas",
    )
    patch = {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
    apps.patch_namespaced_deployment("roll", namespace, patch)

    def rolled():
        sets = apps.list_namespaced_replica_set(namespace, label_selector="app=roll").items
        sizes = sorted((rs.spec.replicas, rs.status.ready_replicas or 0) for rs in sets)
        status = apps.read_namespaced_deployment("roll", namespace).status
        return sizes == [(0, 0), (2, 2)] and status.updated_replicas == 2

    cluster.wait_for(rolled, what="the new replicaset to take over")
    pods = _active(_pods(core, namespace, selector="app=roll"))
    assert all((pod.metadata.annotations or {}).get("rev") == "2" for pod in pods)


def test_job_completes_when_its_pods_succeed(loopback, cluster, batch, core, namespace):
    """Loopback only: pods never finish by themselves, so the test marks them Succeeded."""
    template = {"spec": {**pod_manifest("job")["spec"], "restartPolicy": "Never"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "done"},
        "spec": {"parallelism": 2, "completions": 2, "template": template},
    }
    batch.create_namespaced_job(namespace, job)
    pods = cluster.wait_for(
        lambda: len(found := _pods(core, namespace, selector="job-name=done")) == 2 and found,
        what="2 job pods",
    )
    for pod in pods:
        core.patch_namespaced_pod_status(
            pod.metadata.name, namespace, {"status": {"phase": "Succeeded"}}
        )

    def complete():
        status = batch.read_namespaced_job("done", namespace).status
        return status.succeeded == 2 and any(
            c.type == "Complete" and c.status == "True" for c in status.conditions or []
        )

    cluster.wait_for(complete, what="the job to complete")
    assert len(_pods(core, namespace, selector="job-name=done")) == 2
