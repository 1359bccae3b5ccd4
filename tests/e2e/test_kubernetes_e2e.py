"""Kubernetes end to end (issue 4, section 5): real API server, Redis, worker and beat.

The loopback API server has 4 nodes of 8 CPU, 32Gi and 4 GPUs (16 GPUs);
``max_load_desired`` is 0.9, so EDL's load cap is ``floor(0.9 x 16) = 14``
GPUs. GPUs are the binding resource by design: every replica asks for at
most 2 CPU and 4Gi per GPU, so a node whose GPUs are taken never runs out of
CPU or memory first, and the CPU cap (28.8 of 32 CPU) is never reached.

Three ElasticJobs on Deployments (min..max, per-replica requests):

* ``alpha`` 1..8 replicas of 1 GPU, 1 CPU, 2Gi;
* ``bravo`` 2..6 replicas of 1 GPU, 2 CPU, 4Gi;
* ``charlie`` 1..3 replicas of 2 GPUs, 2 CPU, 4Gi.

What EDL's rounds give (least fulfilled first, one replica each), checked
step by step in one test because each step starts where the last one ended:

1. fill: alpha 4, bravo 4, charlie 3 = 14 GPUs, the cap, and no more;
2. steady state: autoscale rounds plan from the watch cache: no LIST, no write;
3. EDL pending rule: ``delta`` (1..2 replicas of 4 GPUs) fits on no node; its
   Pending pod's 4 GPUs count in the cluster's load, 18 > 14, so the most
   fulfilled jobs shrink one replica each (charlie 1.0, bravo 0.5, alpha
   0.43) back to 14; the newest pods go, which empties node-3, and delta
   runs. Only the three shrunk jobs are written to;
4. with 30% of PUTs answered 409 or 500, deleting delta frees its 4 GPUs
   and the three grow back to 4/4/3;
5. ``paused: true`` freezes bravo while charlie's deletion lets alpha grow
   to its max 8; unpaused, bravo grows to 6 (8 + 6 = 14).

A second test: a scale whose ElasticJob status write failed (500) still gets
its status written, by the retry that finds the target already in force.

Every wait polls with a timeout. The test reads objects from the server's
store in process, so its own checks are not in the request counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.kube_fixtures import (
    DEPLOYMENTS,
    JobShape,
    KubeCluster,
    KubeE2E,
    kube_cluster_fixture,  # noqa: F401  (registers the fixtures by their names)
    kube_e2e_factory_fixture,  # noqa: F401
    kube_redis_fixture,  # noqa: F401
    wait_for,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

LOAD = 0.9
GPU_CAP = 14  # floor(0.9 x 16 GPUs)
INTERVAL = 2.0
SETTLE = 40.0  # seconds for a change to be planned, applied and scheduled
STEADY_ROUNDS = 3
FAULT_SEED = 1  # the first two PUTs fail: one 409, then one 500

ALPHA = JobShape("alpha", 1, 8, cpu="1", memory="2Gi", gpus=1)
BRAVO = JobShape("bravo", 2, 6, cpu="2", memory="4Gi", gpus=1)
CHARLIE = JobShape("charlie", 1, 3, cpu="2", memory="4Gi", gpus=2)
DELTA = JobShape("delta", 1, 2, cpu="4", memory="8Gi", gpus=4)

AT_MIN = {"alpha": 1, "bravo": 2, "charlie": 1}
FILLED = {"alpha": 4, "bravo": 4, "charlie": 3}
MAKING_ROOM = {"alpha": 3, "bravo": 3, "charlie": 2, "delta": 1}
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def describe(e2e: KubeE2E) -> str:
    cluster = e2e.cluster
    names = [deployment["metadata"]["name"] for deployment in cluster.objects(DEPLOYMENTS)]
    jobs = {
        name: (cluster.replicas(name), cluster.running(name), cluster.pending(name))
        for name in names
    }
    plan = e2e.store.latest_plan()
    reasons = (
        {d.job: f"{d.current}->{d.target} {d.reason.message}" for d in plan.plan.decisions}
        if plan
        else {}
    )
    logs = "\n".join(proc.log_text()[-3000:] for proc in e2e.procs.started)
    return (
        f"\njobs (replicas, running, pending): {jobs}\nGPUs requested: "
        f"{cluster.gpus_requested()}\nlatest plan: {reasons}\nrequests: "
        f"{cluster.request_counts()}\n--- logs ---\n{logs}"
    )


def wait_settled(e2e: KubeE2E, expected: dict[str, int], *, what: str) -> None:
    try:
        wait_for(lambda: e2e.cluster.settled(expected), timeout=SETTLE, what=what, interval=0.2)
    except AssertionError as error:
        raise AssertionError(f"{error}{describe(e2e)}") from None


def wait_quiet(e2e: KubeE2E, *, rounds: int = 2) -> int:
    """Wait for ``rounds`` consecutive autoscale runs that changed nothing; the last run's id."""

    def quiet() -> int:
        runs = e2e.runs()
        tail = runs[-rounds:]
        return tail[-1].run_id if len(tail) == rounds and not any(r.changes for r in tail) else 0

    try:
        run_id: int = wait_for(quiet, timeout=SETTLE, what=f"{rounds} quiet autoscale runs")
    except AssertionError as error:
        raise AssertionError(f"{error}{describe(e2e)}") from None
    return run_id


def job_versions(cluster: KubeCluster, names: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """Per job: its Deployment's spec generation and its ElasticJob's resourceVersion.

    Only a scale changes the first and only the scaler's status write the second.
    """
    found = {}
    for name in names:
        deployment = cluster.deployment(name) or {}
        resource = cluster.elastic_job(name) or {}
        found[name] = (
            (deployment.get("metadata") or {}).get("generation"),
            (resource.get("metadata") or {}).get("resourceVersion"),
        )
    return found


def written(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    return {key: n for key, n in counts.items() if key[0] in WRITE_VERBS}


def events_about(cluster: KubeCluster) -> dict[str, list[str]]:
    by_job: dict[str, list[str]] = {}
    for event in cluster.objects("events"):
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "ElasticJob":
            by_job.setdefault(str(involved.get("name")), []).append(str(event.get("reason")))
    return by_job


def status_replicas(cluster: KubeCluster, name: str) -> int | None:
    resource = cluster.elastic_job(name) or {}
    value = (resource.get("status") or {}).get("currentReplicas")
    return None if value is None else int(value)


def test_elastic_jobs_on_kubernetes_end_to_end(kube_cluster, kube_e2e_factory, capsys) -> None:
    cluster: KubeCluster = kube_cluster
    for shape in (ALPHA, BRAVO, CHARLIE):
        cluster.create_job(shape)
    wait_for(lambda: cluster.settled(AT_MIN), timeout=SETTLE, what="the jobs running at min")
    e2e: KubeE2E = kube_e2e_factory(interval=INTERVAL, load=LOAD)

    # 1. Fill the cluster up to the load cap, and not beyond.
    wait_settled(e2e, FILLED, what=f"the jobs grown to {FILLED}")
    quiet_run = wait_quiet(e2e)
    assert cluster.settled(FILLED), describe(e2e)
    assert cluster.gpus_requested() == GPU_CAP
    plan = e2e.store.latest_plan()
    assert plan is not None and plan.run_id >= quiet_run
    assert plan.cluster.gpu_limit == GPU_CAP and plan.cluster.gpu_total == 16
    # Within a few autoscale rounds (EDL plans all of its dry-run rounds at once) and
    # never beyond the cap: no plan ever asked for more than 14 GPUs.
    plans = sorted(e2e.store.plan_history(limit=200), key=lambda record: record.run_id)
    targets = [record.plan.targets() for record in plans]
    assert {f"ml/{name}": count for name, count in FILLED.items()} in targets[:3], targets
    for record in plans:
        planned = sum(d.target * record.requests[d.job].gpu for d in record.plan.decisions)
        assert planned <= GPU_CAP, (record.run_id, record.plan.targets())
    limits = {d.job: d.reason.numbers["limited_by"] for d in plan.plan.decisions}
    # EDL: alpha and bravo stop at the GPU cap, charlie at its max.
    assert limits == {"ml/alpha": "gpu_cap", "ml/bravo": "gpu_cap", "ml/charlie": "at_max"}
    wait_for(
        lambda: all(status_replicas(cluster, n) == c for n, c in FILLED.items()),
        timeout=SETTLE,
        what="ElasticJob status.currentReplicas written",
    )
    assert {job: set(reasons) for job, reasons in events_about(cluster).items()} == {
        "alpha": {"ScaledUp"},
        "bravo": {"ScaledUp"},
        "charlie": {"ScaledUp"},
    }

    # 2. Steady state: rounds plan from the watch cache; no LIST and no write.
    cluster.reset_request_counts()
    before = e2e.last_run_id()
    rounds = e2e.wait_rounds(STEADY_ROUNDS, after=before, timeout=SETTLE)
    steady = cluster.request_counts()
    assert not any(r.changes for r in rounds), describe(e2e)
    assert not [key for key in steady if key[0] == "list"], steady
    assert written(steady) == {}, steady
    per_round = sum(steady.values()) / len(rounds)
    with capsys.disabled():
        print(
            f"\nsteady state: {len(rounds)} autoscale rounds, API requests {steady} "
            f"({per_round:.1f} per round)"
        )

    # 3. EDL pending rule: delta's Pending pod pushes the load over the cap.
    cluster.create_job(DELTA)
    wait_for(lambda: cluster.pending("delta") == 1, timeout=SETTLE, what="delta Pending")
    cluster.reset_request_counts()
    baseline = job_versions(cluster, ("delta",))
    if cluster.real:
        # kube-scheduler places by score and the ReplicaSet controller picks which pods
        # to remove by its own ranking, so freed GPUs need not land on one node: delta
        # runs, or stays Pending inside the cap. EDL's part is the same either way.
        shrunk = {name: MAKING_ROOM[name] for name in ("alpha", "bravo", "charlie")}
        wait_settled(e2e, shrunk, what=f"the most fulfilled jobs shrunk: {shrunk}")
        wait_for(lambda: cluster.replicas("delta") == 1, timeout=SETTLE, what="delta at 1")
    else:
        wait_settled(e2e, MAKING_ROOM, what=f"the most fulfilled jobs shrunk: {MAKING_ROOM}")
    wait_quiet(e2e)
    assert cluster.gpus_requested() == GPU_CAP
    making_room = cluster.request_counts()
    # Writes only to the three jobs it scaled: delta's Deployment and ElasticJob untouched.
    assert job_versions(cluster, ("delta",)) == baseline
    assert set(written(making_room)) <= {
        ("update", "deployments/scale"),
        ("update", "elasticjobs/status"),
        ("create", "events"),
    }, making_room
    assert making_room.get(("update", "deployments/scale"), 0) >= 3, making_room
    assert not [key for key in making_room if key[0] == "list"], making_room
    shrinks = [
        d
        for p in e2e.store.plan_history(limit=50)
        for d in p.plan.changes
        if d.reason.rule == "edl.scale_down"
    ]
    assert {d.job for d in shrinks} == {"ml/alpha", "ml/bravo", "ml/charlie"}
    assert all("gpu_cap" in d.reason.message for d in shrinks), [d.reason for d in shrinks]
    assert "ScaledDown" in events_about(cluster)["charlie"]
    assert "delta" not in events_about(cluster)
    with capsys.disabled():
        print(f"pending rule: 3 jobs shrunk, API requests {making_room}")

    # 4. Deleting delta frees room; the others grow back, through 30% failing PUTs
    # (injected by the loopback server; a real one fails no request on purpose).
    cluster.reset_request_counts()
    if cluster.server is not None:
        cluster.server.inject_faults(verb="update", rate=0.3, codes=(409, 500), seed=FAULT_SEED)
    try:
        cluster.delete_job("delta")
        wait_settled(e2e, FILLED, what=f"the jobs grown back to {FILLED}")
        wait_quiet(e2e)
    finally:
        if cluster.server is not None:
            cluster.server.inject_faults(rate=0.0)
    regrown = cluster.request_counts()
    assert cluster.settled(FILLED) and cluster.gpus_requested() == GPU_CAP
    if cluster.server is not None:
        # The seeded faults hit the first two PUTs of a Scale: a 409 the scaler re-reads
        # and retries, then a 500 that fails the task (a ScaleFailed event) for Celery.
        assert regrown.get(("update", "deployments/scale"), 0) > 3, regrown
        assert any("ScaleFailed" in reasons for reasons in events_about(cluster).values())
    else:
        assert regrown.get(("update", "deployments/scale"), 0) >= 3, regrown

    # 5. paused: true freezes bravo while charlie's deletion makes room.
    cluster.set_paused("bravo", True)
    cluster.delete_job("charlie")
    wait_for(lambda: not cluster.pods("charlie"), timeout=SETTLE, what="charlie's pods gone")
    frozen = job_versions(cluster, ("bravo",))
    wait_settled(e2e, {"alpha": 8, "bravo": 4}, what="alpha at max, bravo frozen")
    last = wait_quiet(e2e)
    e2e.wait_rounds(STEADY_ROUNDS, after=last, timeout=SETTLE)
    assert cluster.settled({"alpha": 8, "bravo": 4}), describe(e2e)
    assert job_versions(cluster, ("bravo",)) == frozen
    bravo = e2e.store.latest_plan()
    assert bravo is not None and bravo.plan.for_job("ml/bravo") is None  # not a candidate
    cluster.set_paused("bravo", False)
    wait_settled(e2e, {"alpha": 8, "bravo": 6}, what="bravo unpaused and grown to 6")
    assert cluster.gpus_requested() == GPU_CAP
    wait_for(
        lambda: status_replicas(cluster, "alpha") == 8 and status_replicas(cluster, "bravo") == 6,
        timeout=SETTLE,
        what="ElasticJob status.currentReplicas of alpha 8 and bravo 6",
    )


def test_status_is_written_after_a_failed_status_write(kube_cluster, kube_e2e_factory) -> None:
    cluster: KubeCluster = kube_cluster
    if cluster.server is None:
        pytest.skip("needs the loopback server's fault injection")
    echo = JobShape("echo", 1, 2, cpu="1", memory="1Gi", gpus=1)
    cluster.create_job(echo)
    wait_for(lambda: cluster.settled({"echo": 1}), timeout=SETTLE, what="echo running at min")
    # Every status write fails while the Scale PUT goes through; the retries (which
    # find the target already at 2) must write the status once the faults stop.
    server = cluster.server
    server.inject_faults(verb="update", resource="elasticjobs/status", rate=1.0, codes=(500,))
    e2e: KubeE2E = kube_e2e_factory(interval=INTERVAL, load=LOAD)
    try:
        wait_settled(e2e, {"echo": 2}, what="echo grown to 2")
        # The first attempt's status write and a retry's, both failed.
        wait_for(
            lambda: cluster.request_counts().get(("update", "elasticjobs/status"), 0) >= 2,
            timeout=SETTLE,
            what="a retry writing the status again",
        )
    finally:
        server.inject_faults(rate=0.0)
    applied = wait_for(lambda: e2e.store.applied("ml/echo"), timeout=SETTLE, what="scale applied")
    assert applied is not None and applied.outcome == "already at target", describe(e2e)
    last = wait_quiet(e2e)
    e2e.wait_rounds(STEADY_ROUNDS, after=last, timeout=SETTLE)
    assert status_replicas(cluster, "echo") == 2, describe(e2e)
