"""``kill -9`` of a worker running the Kubernetes scaler, several times, with restarts.

The loopback API server serves Deployments and ElasticJobs; a real Celery
worker (``TRAINSCALER_SCALER=kubernetes``) decides reports and scales them.
Each round the worker is killed in the middle of a scale (before the
Deployment's Scale write, or right after it), and a fresh worker is started.
Every job must end at exactly the replica count an in-order replay of its
reports gives, and no write may ever be stale: watched from the API server,
every job's ElasticJob status carries non-decreasing generations and every
Deployment's replicas follow its decisions in generation order.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import watch as k8s_watch
from urllib3.exceptions import ProtocolError

from scheduler_core.models import EpochReport
from tests.integration.conftest import PREFIX, Procs, wait_for
from tests.integration.replay import replay_throughput
from tests.integration.test_kube_adapter import NS
from tests.integration.throughput_jobs import create_throughput_jobs, loopback_apiserver
from trainscaler_sim.apiserver import LoopbackApiServer
from workers.adapters.kubernetes.client import KubeClient
from workers.adapters.kubernetes.kinds import ELASTICJOBS

pytestmark = pytest.mark.timeout(300)

JOBS = 4
ROUNDS = 3
GENERATION = re.compile(r"^gen (\d+) ")


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[LoopbackApiServer, Path]]:
    with loopback_apiserver(tmp_path / "kubeconfig", simulate_cluster=True) as served:
        yield served


class History:
    """Every write the API server applied, seen through two watches."""

    def __init__(self, api_client: Any) -> None:
        self.replicas: dict[str, list[int]] = defaultdict(list)
        self.generations: dict[str, list[int]] = defaultdict(list)
        self._api = api_client
        self._watches = [k8s_watch.Watch(), k8s_watch.Watch()]
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._until_stopped, args=(self._deployments,), daemon=True),
            threading.Thread(target=self._until_stopped, args=(self._elastic_jobs,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _until_stopped(self, follow: Callable[[], None]) -> None:
        # Watch.stop() takes effect at the next event; the server stopping
        # first ends the stream mid-chunk. Only then is that not an error.
        try:
            follow()
        except ProtocolError:
            if not self._stopping.is_set():
                raise

    def _deployments(self) -> None:
        apps = k8s_client.AppsV1Api(self._api)
        for event in self._watches[0].stream(apps.list_namespaced_deployment, NS):
            deployment = event["object"]
            series = self.replicas[deployment.metadata.name]
            if not series or series[-1] != deployment.spec.replicas:
                series.append(deployment.spec.replicas)

    def _elastic_jobs(self) -> None:
        custom = k8s_client.CustomObjectsApi(self._api)
        stream = self._watches[1].stream(
            custom.list_namespaced_custom_object,
            ELASTICJOBS.group, ELASTICJOBS.version, NS, ELASTICJOBS.plural,
        )  # fmt: skip
        for event in stream:
            obj = event["object"]
            reason = ((obj.get("status") or {}).get("lastDecision") or {}).get("reason") or ""
            match = GENERATION.match(reason)
            series = self.generations[obj["metadata"]["name"]]
            if match and (not series or series[-1] != int(match.group(1))):
                series.append(int(match.group(1)))

    def stop(self) -> None:
        self._stopping.set()
        for watch in self._watches:
            watch.stop()


def _round_reports(names: list[str], round_: int) -> dict[str, EpochReport]:
    return {
        name: EpochReport(
            job=f"{NS}/{name}",
            replicas=1 + (round_ + index) % 4,
            epoch_time_s=None if round_ == 0 else 10.0 + ((round_ * 7 + index * 3) % 5),
            epoch=round_,
        )
        for index, name in enumerate(names)
    }


def _paused(redis_client: Any, point: str) -> dict[str, Any]:
    raw = redis_client.get(f"{PREFIX}faults:paused:{point}")
    return json.loads(raw) if raw else {}


def test_kill9_of_the_kubernetes_scaling_worker_leaves_exact_replicas_and_no_stale_write(
    apiserver, procs: Procs, client_app, redis_client, store
) -> None:
    server, kubeconfig = apiserver
    kube = KubeClient(server.api_client())
    names = create_throughput_jobs(kube, (f"trainer{i}" for i in range(JOBS)))
    history = History(server.api_client())
    env = {
        "TRAINSCALER_SCALER": "kubernetes",
        "TRAINSCALER_KUBECONFIG": str(kubeconfig),
        "TRAINSCALER_KUBE_QPS": "1000",
        "TRAINSCALER_KUBE_BURST": "1000",
    }
    sent: dict[str, list[EpochReport]] = defaultdict(list)
    # What recovers a killed scale: its decision waits in the pending-scale index
    # and beat's sweep_leases sends it again (UNRECORDED_TASKS).
    procs.beat("beat")
    worker = procs.worker("k0", extra_env=env)
    kills = 0
    try:
        for round_ in range(ROUNDS):
            point = "scaler_call" if round_ % 2 == 0 else "scaler_called"
            redis_client.set(f"{PREFIX}faults:pause:{point}", "60")
            for name, report in _round_reports(names, round_).items():
                sent[name].append(report)
                # Not waited for: the solo worker will be paused inside a scale.
                client_app.send_task(
                    "trainscaler.report_epoch", args=[report.model_dump(mode="json")]
                )
            marker: dict[str, Any] = wait_for(
                functools.partial(_paused, redis_client, point),
                timeout=30,
                what=f"paused at {point}",
            )
            assert marker["pid"] == worker.pid
            worker.kill9()
            kills += 1
            redis_client.delete(f"{PREFIX}faults:pause:{point}", f"{PREFIX}faults:paused:{point}")
            worker = procs.worker(f"k{round_ + 1}", extra_env=env)
            expected = {name: replay_throughput(sent[name]) for name in names}

            def settled(want: dict[str, int] = expected) -> bool:
                return all(
                    store.cursor(f"{NS}/{n}").last_target == w and history.replicas[n][-1:] == [w]
                    for n, w in want.items()
                )

            wait_for(settled, timeout=60, what=f"round {round_}: replicas {expected}")
    finally:
        history.stop()

    final = {
        name: kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{name}")["spec"][
            "replicas"
        ]
        for name in names
    }
    expected = {name: replay_throughput(sent[name]) for name in names}
    assert final == expected
    stale = 0
    for name in names:
        generations = history.generations[name]
        stale += sum(1 for a, b in itertools.pairwise(generations) if b < a)
        # Every replica count the Deployment took is a decision's, in generation order.
        decided = [
            d.decision.target
            for d in sorted(store.decisions(f"{NS}/{name}"), key=lambda d: d.generation)
        ]
        position = 0
        for value in history.replicas[name][1:]:  # the first is the Deployment's creation
            while position < len(decided) and decided[position] != value:
                position += 1
            if position == len(decided):
                stale += 1
    print(f"kube kill -9: {kills} kills, final {final}, stale writes {stale}")
    assert kills == ROUNDS
    assert stale == 0, (dict(history.generations), dict(history.replicas))
