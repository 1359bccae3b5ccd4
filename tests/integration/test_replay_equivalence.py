"""Replay equivalence: the runtime decides what the simulator decides.

One recorded report stream (``tests/data/replay-workload1-30jobs-40rounds.jsonl.gz``:
the simulator running ``goodput`` on the first 30 jobs of workload 1, first
40 rounds, ``kube`` placement; ``python -m trainscaler_sim.trace.replay record ...``) is
played two ways:

* through the simulator's policy loop (``trainscaler_sim.trace.replay.replay``);
* through the real runtime: a real redis-server, a real Celery worker and a
  real beat with the Kubernetes adapters (``TRAINSCALER_SCALER=kubernetes``:
  the list-and-watch reader and the /scale scaler), the loopback API server
  with its Deployment and ReplicaSet controllers and its scheduler running
  the shipped ``deploy/scheduler/kube-scheduler-config.yaml`` profile
  (NodeResourcesFit MostAllocated), and the HTTP API (uvicorn) receiving
  every report as ``POST /job``.

The test plays the workload's side only: each round it deletes the jobs that
finished, creates the jobs that arrived (an ElasticJob without policy, its
application and bounds, on a Deployment at 0 replicas whose pods ask for the
packing scheduler), posts the round's reports, and triggers one
``autoscale``. Everything else is the runtime's and the controllers': the
worker reads the jobs and the cluster from the API server, decides, and
scales the Deployments; the ReplicaSet controller creates or deletes pods and
the scheduler binds them. Before each round the test waits (with timeouts)
until every pod is bound and running and the API server has streamed every
change to its watchers, then checks that the pods sit where the simulator
placed its replicas (free GPUs per node, exactly).

Time is the replay's: the shared Redis clock (``TRAINSCALER_CLOCK=redis``)
and the API server's clock are set to each report's and round's time, so
rounds line up and pod ages (which order a ReplicaSet's scale-down) are the
simulator's.

Pass: per round, the same free GPUs per node as the simulator, the same jobs
planned, and the same targets; so the sequence of targets per job is
identical.

One difference is by construction: a job arrives with its Deployment at 0
replicas and trainscaler admits it, where the simulator models its first
replica as pending until the round. goodput reads both as a job that waits
(``ElasticJob.started`` is false either way), so decisions are the same;
only the decision's ``current`` differs (0 here, 1 there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from celery import Celery

from scheduler_core.models import ElasticJob, EpochReport
from scheduler_core.policies.base import in_round_order
from tests.e2e.kube_fixtures import DEPLOYMENTS, EJ_GROUP, EJ_PLURAL, EJ_VERSION, GPU, PODS
from tests.integration.api_fixtures import ServedApi
from tests.integration.conftest import BASE_ENV, PREFIX, REPO, Procs, settings_for, wait_for
from trainscaler_sim.apiserver import LoopbackApiServer
from trainscaler_sim.apiserver.controllers.scoring import profiles_from_config
from trainscaler_sim.trace.replay import RecordedRound, Recording, replay, targets_by_job
from workers.adapters.kubernetes import install_crd
from workers.adapters.state_store import StateStore
from workers.api.app import create_app
from workers.celery_app import create_app as create_celery_app
from workers.wiring import RedisClock, Runtime

pytestmark = pytest.mark.timeout(300)

RECORDING = REPO / "tests" / "data" / "replay-workload1-30jobs-40rounds.jsonl.gz"
SCHEDULER_CONFIG = REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
NAMESPACE = "sim"  # trainscaler_sim.trace.engine.NAMESPACE: job keys are sim/<name>
JOB_LABEL = "trainscaler.io/job"
SETTLE_S = 60.0


class ReplayClock:
    """The API server's clock: the replay's time, in seconds from the epoch."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> datetime:
        return datetime.fromtimestamp(self.seconds, UTC)


@dataclass
class Cluster:
    server: LoopbackApiServer
    clock: ReplayClock
    kubeconfig: Path
    scheduler_name: str

    def api(self) -> Any:
        return self.server.api_client()

    def objects(self, storage: str) -> list[dict[str, Any]]:
        items, _ = self.server.store.items(storage, NAMESPACE)
        return list(items)

    def live_pods(self) -> list[dict[str, Any]]:
        return [
            pod
            for pod in self.objects(PODS)
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def replicas(self) -> dict[str, int]:
        return {
            d["metadata"]["name"]: int(d["spec"]["replicas"]) for d in self.objects(DEPLOYMENTS)
        }

    def gpu_free(self) -> dict[str, int]:
        """Free GPUs per node, from the pods bound to it."""
        nodes, _ = self.server.store.items("nodes", None)
        free = {n["metadata"]["name"]: int(n["status"]["allocatable"][GPU]) for n in nodes}
        for pod in self.live_pods():
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                free[node] -= 1
        return free

    def watchers_caught_up(self) -> bool:
        """Controllers idle and every watch stream has sent every change so far."""
        if not self.server.wait_idle(timeout=SETTLE_S):
            return False
        # A test-only probe of the store: each watch stream drains one queue.
        subscribers = self.server.store._subscribers
        with self.server.store.lock:
            return all(s.events.empty() for subs in subscribers.values() for s in subs)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    profiles = profiles_from_config(SCHEDULER_CONFIG)
    (scheduler_name,) = profiles
    clock = ReplayClock()
    server = LoopbackApiServer(
        "127.0.0.1", 0, controllers=True, scheduler=True, clock=clock, scheduler_profiles=profiles
    )
    server.start()
    try:
        # The simulator's cluster (trainscaler_sim.trace.engine.SimConfig): 16 nodes of 4
        # GPUs, 32 cores and 256 GB, named as it names them.
        for index in range(16):
            server.add_node(f"node-{index:02d}", cpu="32", memory="256G", gpus=4)
        api = server.api_client()
        install_crd(api)
        from kubernetes import client as k8s

        namespace: Any = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        k8s.CoreV1Api(api).create_namespace(namespace)
        api.close()
        yield Cluster(
            server, clock, server.write_kubeconfig(tmp_path / "kubeconfig"), scheduler_name
        )
    finally:
        server.stop()


@pytest.fixture
def replay_env(redis_url: str, redis_client: redis.Redis, cluster: Cluster) -> dict[str, str]:
    return {
        **BASE_ENV,
        "TRAINSCALER_REDIS_URL": redis_url,
        "TRAINSCALER_FAULT_INJECTION": "false",
        "TRAINSCALER_SCALER": "kubernetes",
        "KUBECONFIG": str(cluster.kubeconfig),
        "TRAINSCALER_KUBECONFIG": str(cluster.kubeconfig),
        "TRAINSCALER_KUBE_QPS": "500",
        "TRAINSCALER_KUBE_BURST": "500",
        "TRAINSCALER_CLUSTER_POLICY": "goodput",
        "TRAINSCALER_MAX_LOAD_DESIRED": "1.0",
        "TRAINSCALER_CLOCK": "redis",
        # Rounds are triggered by the test, one per recorded round; beat runs
        # (leases, metrics) but never fires a round of its own.
        "TRAINSCALER_AUTOSCALE_INTERVAL": "1000000",
        "TRAINSCALER_LEASE_SWEEP_INTERVAL": "30",
        "TRAINSCALER_API_AUTH_DISABLED": "true",
    }


@pytest.fixture
def served(replay_env: dict[str, str]) -> Iterator[tuple[ServedApi, Celery]]:
    settings = settings_for(replay_env)
    app = create_celery_app(settings)
    with ServedApi(create_app(settings, runtime=Runtime(settings))) as api:
        yield api, app
    app.close()


def _task(report: EpochReport) -> dict[str, object]:
    """The report as a job sends it: KubeML's TrainTask with trainscaler's epoch facts."""
    namespace, name = report.job.split("/", 1)
    state: dict[str, object] = {"parallelism": max(1, report.replicas)}
    optional = {
        "elapsed_time": report.epoch_time_s,
        "epoch": report.epoch,
        "total_epochs": report.total_epochs,
        "iterations": report.iterations,
        "nodes": report.nodes,
    }
    state.update({k: v for k, v in optional.items() if v is not None})
    return {
        "job_id": name,
        "parameters": {
            "model_type": name.rsplit("-", 1)[0],
            "batch_size": 1,
            "epochs": report.total_epochs or 1,
            "dataset": "replay",
            "namespace": namespace,
        },
        "state": state,
    }


def _deployment(job: ElasticJob, *, scheduler_name: str) -> dict[str, Any]:
    """The job's workload: 0 replicas until trainscaler admits it; one GPU per replica."""
    per_replica = {
        "cpu": f"{job.requests.cpu_milli}m",
        "memory": f"{job.requests.memory_mega}M",
        GPU: str(job.requests.gpu),
    }
    labels = {JOB_LABEL: job.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": job.name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": scheduler_name,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "trainer:1",
                            "resources": {"requests": per_replica, "limits": per_replica},
                        }
                    ],
                },
            },
        },
    }


def _elastic_job(job: ElasticJob) -> dict[str, Any]:
    """No policy: the cluster policy (goodput) plans it."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": job.name},
        "minReplicas": job.min_replicas,
        "maxReplicas": job.max_replicas,
        "defaultParallelism": job.default_parallelism,
    }
    if job.application is not None:
        spec["application"] = job.application
    return {
        "apiVersion": f"{EJ_GROUP}/{EJ_VERSION}",
        "kind": "ElasticJob",
        "metadata": {"name": job.name, "namespace": NAMESPACE},
        "spec": spec,
    }


class Workload:
    """The jobs' side: submit and remove jobs through the official client."""

    def __init__(self, cluster: Cluster) -> None:
        from kubernetes import client as k8s

        self.cluster = cluster
        self.api = cluster.api()
        self.apps = k8s.AppsV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.present: dict[str, int] = {}  # job name -> the replicas it should have

    def arrive(self, job: ElasticJob) -> None:
        deployment: Any = _deployment(job, scheduler_name=self.cluster.scheduler_name)
        self.apps.create_namespaced_deployment(NAMESPACE, deployment)
        self.custom.create_namespaced_custom_object(
            EJ_GROUP, EJ_VERSION, NAMESPACE, EJ_PLURAL, _elastic_job(job)
        )
        self.present[job.name] = 0

    def finish(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            EJ_GROUP, EJ_VERSION, NAMESPACE, EJ_PLURAL, name
        )
        self.apps.delete_namespaced_deployment(name, NAMESPACE, propagation_policy="Background")
        del self.present[name]

    def settled(self) -> bool:
        """Each Deployment at its count, every pod bound and running, watchers caught up."""
        return not self.unsettled()

    def unsettled(self) -> str:
        """What is not settled yet ("" when nothing)."""
        replicas = self.cluster.replicas()
        if replicas != self.present:
            return f"replicas {replicas} != {self.present}"
        pods = self.cluster.live_pods()
        per_job = Counter(p["metadata"]["labels"][JOB_LABEL] for p in pods)
        if any(per_job[name] != count for name, count in self.present.items()):
            return f"pods {dict(per_job)} != {self.present}"
        waiting = [
            (p["metadata"]["name"], (p.get("status") or {}).get("conditions"))
            for p in pods
            if (p.get("status") or {}).get("phase") != "Running"
        ]
        if waiting:
            return f"not running: {waiting}"
        return "" if self.cluster.watchers_caught_up() else "watchers behind"

    def close(self) -> None:
        self.api.close()


def _settle(workload: Workload, *, what: str) -> None:
    try:
        wait_for(workload.settled, timeout=SETTLE_S, what=what)
    except AssertionError as error:
        raise AssertionError(f"{error}: {workload.unsettled()}") from None


def _play_round(
    recorded: RecordedRound,
    *,
    workload: Workload,
    http: httpx.Client,
    celery_app: Celery,
    clock: RedisClock,
    store: StateStore,
) -> dict[str, int]:
    cluster = workload.cluster
    cluster.clock.seconds = recorded.now
    names = {job.name for job in recorded.jobs}
    for name in sorted(set(workload.present) - names):
        workload.finish(name)
    for job in recorded.jobs:
        if job.name not in workload.present:
            workload.arrive(job)
    _settle(workload, what=f"jobs in place at {recorded.now}")
    # The pods sit where the simulator put its replicas.
    assert cluster.gpu_free() == recorded.cluster.nodes.nodes_gpu_free, recorded.now
    reports = in_round_order(recorded.reports)
    for report in reports:
        clock.set(report.at)  # the API stamps the report with the clock's time
        answer = http.post("/job", params={"wait": 0}, json=_task(report))
        assert answer.status_code in (200, 202), answer.text
    wait_for(
        lambda: store.inbox_length("goodput") == len(reports),
        timeout=60,
        what=f"{len(reports)} reports handed to goodput at {recorded.now}",
    )
    clock.set(recorded.now)
    result = celery_app.send_task("trainscaler.autoscale").get(timeout=60)
    assert result["ran"] is True, result
    plan = store.latest_plan()
    assert plan is not None and plan.run_id == result["run_id"]
    assert store.inbox_length("goodput") == 0
    # What the worker read through the API server is what the simulator had.
    assert plan.cluster.nodes.nodes_gpu_free == recorded.cluster.nodes.nodes_gpu_free
    assert {d.job for d in plan.plan.decisions} == {j.key for j in recorded.jobs}
    targets = plan.plan.targets()
    for key, target in targets.items():
        workload.present[key.split("/", 1)[1]] = target
    # The worker scales; the controllers and the scheduler act on it. Settled
    # before the workload moves on (a job finishing frees GPUs only after).
    _settle(workload, what=f"targets of {recorded.now} in force")
    return targets


def test_runtime_and_simulator_give_identical_targets(
    procs: Procs,
    cluster: Cluster,
    served: tuple[ServedApi, Celery],
    replay_env: dict[str, str],
    redis_client: redis.Redis,
) -> None:
    recording = Recording.read(RECORDING)
    assert recording.header.policy == "goodput"
    assert recording.header.params == {"max_load_desired": 1.0}
    simulated = replay(recording.rounds, policy="goodput", params=recording.header.params)
    recorded = [r.targets for r in recording.rounds]
    assert simulated == recorded

    api, celery_app = served
    clock = RedisClock(redis_client, prefix=PREFIX)
    clock.set(0.0)
    procs.worker("w1", extra_env=replay_env)
    procs.beat("beat", extra_env=replay_env)
    store = StateStore(redis_client, prefix=PREFIX)
    workload = Workload(cluster)
    played = []
    try:
        with httpx.Client(base_url=api.url, timeout=30.0) as http:
            for recorded_round in recording.rounds:
                played.append(
                    _play_round(
                        recorded_round,
                        workload=workload,
                        http=http,
                        celery_app=celery_app,
                        clock=clock,
                        store=store,
                    )
                )
    finally:
        workload.close()
    assert targets_by_job(played) == targets_by_job(simulated)
    assert played == recorded
    # Every round was one the test triggered.
    assert len(store.runs()) == len(recording.rounds)
