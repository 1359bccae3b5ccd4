"""Benchmark: the production topology's cost against cluster size and worker count.

Run: ``.venv/bin/python -m bench.topology`` (``--quick`` for a small smoke run).

A loopback API server (``trainscaler_sim.apiserver``, no controllers, no scheduler) is
filled in-process with N nodes (4 GPUs each), 10 running pods per node, their
Deployments and ElasticJobs, spread over 10 namespaces. Then, measured side
by side in one run:

* **planner** (a child process with one ``KubeAdapter``, as the planner role
  holds it): requests and LISTs at cache start, RSS after sync, and the round
  time from the cache (the reader's snapshot + jobs, the cluster policy,
  the plan) for the default policy (goodput) and for edl, with the API
  requests per steady round. The same round recounted from scratch over
  every cached pod (``inquire`` + a scan of each job's pods: what the reader
  did before the incremental index) is timed next to it where it finishes.
* **scale workers**: ``celery -A workers worker -Q cluster-writes
  --concurrency C`` for C in 1, 2, 4, given scale commands to apply; watch
  streams opened at the server and RSS of every worker process, at the
  smallest and the largest N.

Targets (exit 1 when one is missed): planner round at most 1 s at 10k jobs x
5k nodes (50k pods); 0 API requests per steady round; watch streams at the
server constant in the scale-worker count; scale-worker RSS within 10% from
the smallest to the largest N.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.topology_planner import rss_mb

REPO = Path(__file__).resolve().parents[1]
NAMESPACES = tuple(f"team-{i}" for i in range(10))
PODS_PER_NODE = 10
GPU_SLOTS = 4  # of each node's 10 pods, 4 hold one GPU each (4-GPU nodes)
ROUND_TARGET_S = 1.0
RSS_TOLERANCE = 0.10


# --- filling the server --------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        for child in (int(x) for x in text):
            found += [child, *_children(child)]
    return found


def _template(job: str, *, gpu: bool) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1"} if gpu else {}
    return {
        "metadata": {"labels": {"app": job}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "trainer:1",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": limits},
                }
            ]
        },
    }


def fill(server: Any, *, nodes: int, jobs: int) -> None:
    """N nodes, 10 pods per node (4 of them on one GPU each), ``jobs`` jobs owning them.

    Half the jobs are GPU jobs and share the GPU pods; the others the CPU pods.
    Created in-process: the benchmark is about reading the cluster, not writing it.
    """
    from workers.adapters.kubernetes import install_crd
    from workers.adapters.kubernetes.crd import GROUP, KIND, PLURAL, VERSION

    ops = server.operations
    install_crd(server.api_client())
    resource = {
        name: ops.resource(group, "v1", plural=name)
        for group, name in (("", "namespaces"), ("", "pods"), ("apps", "deployments"))
    }
    elastic = ops.resource(GROUP, VERSION, plural=PLURAL)
    for namespace in NAMESPACES:
        ops.create_stored(resource["namespaces"], {"metadata": {"name": namespace}}, namespace="")
    for index in range(nodes):
        server.add_node(f"node-{index:05d}", cpu="16", memory="64Gi", gpus=4)
    gpu_jobs = max(1, jobs // 2)
    cpu_jobs = max(1, jobs - gpu_jobs)
    replicas: Counter[int] = Counter()
    counters = {True: 0, False: 0}
    for index in range(nodes * PODS_PER_NODE):
        gpu = index % PODS_PER_NODE < GPU_SLOTS
        k = counters[gpu]
        counters[gpu] += 1
        job = k % gpu_jobs if gpu else gpu_jobs + k % cpu_jobs
        replicas[job] += 1
        name = f"job-{job:05d}"
        template = _template(name, gpu=gpu)
        pod = {
            "metadata": {"name": f"{name}-{k // (gpu_jobs if gpu else cpu_jobs)}", **template["metadata"]},
            "spec": {**template["spec"], "nodeName": f"node-{index // PODS_PER_NODE:05d}"},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }  # fmt: skip
        ops.create_stored(resource["pods"], pod, namespace=NAMESPACES[job % len(NAMESPACES)])
    for job in range(jobs):
        name = f"job-{job:05d}"
        namespace = NAMESPACES[job % len(NAMESPACES)]
        gpu = job < gpu_jobs
        deployment = {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas[job],
                "selector": {"matchLabels": {"app": name}},
                "template": _template(name, gpu=gpu),
            },
        }
        ops.create_stored(resource["deployments"], deployment, namespace=namespace)
        spec = {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": max(2, 2 * replicas[job]),
        }
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name}}
        ops.create_stored(elastic, {**body, "spec": spec}, namespace=namespace)


# --- the planner child ------------------------------------------------------------------


def run_planner(server: Any, kubeconfig: Path, *, rounds: int, recount: bool) -> dict[str, Any]:
    watches_before = _watches(server)
    done = subprocess.run(
        [sys.executable, "-m", "bench.topology_planner", str(kubeconfig),
         "--rounds", str(rounds), *(["--recount"] if recount else [])],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"planner child failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures["watches_at_server"] = _watches(server) - watches_before
    return figures


# --- scale workers ----------------------------------------------------------------------


def _watches(server: Any) -> int:
    return sum(n for (verb, _), n in server.request_counts().items() if verb == "watch")


@contextmanager
def _scale_workers(concurrency: int, env: dict[str, str], *, log: Path) -> Iterator[int]:
    celery = str(Path(sys.executable).with_name("celery"))
    with log.open("wb") as out:
        process = subprocess.Popen(
            [celery, "-A", "workers", "worker", "-Q", "cluster-writes",
             "--concurrency", str(concurrency), "--hostname", f"scale{concurrency}@%h",
             "--loglevel", "info", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            cwd=REPO, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        yield process.pid
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _wait_done(log: Path, count: int, *, timeout: float) -> None:
    """``count`` scale tasks finished, as the worker logs them (the task stores no result)."""
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count("] succeeded in ") < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} scale tasks not done after {timeout}s (see {log})")
        time.sleep(0.1)


@dataclass(frozen=True)
class WorkerFigures:
    nodes: int
    concurrency: int
    watches: int
    rss_mb: tuple[float, ...]  # the main process, then each child

    @property
    def child_rss_mb(self) -> float:
        return max(self.rss_mb[1:], default=self.rss_mb[0])


def run_workers(
    server: Any, kubeconfig: Path, *, redis_url: str, nodes: int, concurrency: int, tmp: Path
) -> WorkerFigures:
    from scheduler_core.models import Reason
    from workers.celery_app import create_app
    from workers.scaling import ScaleCommand
    from workers.settings import Settings

    env = {
        "TRAINSCALER_REDIS_URL": redis_url,
        "TRAINSCALER_SCALER": "kubernetes",
        "TRAINSCALER_KUBECONFIG": str(kubeconfig),
        "TRAINSCALER_KUBE_QPS": "1000",
        "TRAINSCALER_KUBE_BURST": "1000",
        "TRAINSCALER_FAULT_INJECTION": "false",
    }
    app = create_app(Settings(redis_url=redis_url))
    watches_before = _watches(server)
    try:
        log = tmp / f"scale-{nodes}-{concurrency}.log"
        with _scale_workers(concurrency, env, log=log) as pid:
            # Enough commands that every child takes some; each a new generation.
            results = []
            for index in range(8 * concurrency):
                job = index % 50
                command = ScaleCommand(
                    job=f"{NAMESPACES[job % len(NAMESPACES)]}/job-{job:05d}",
                    target=1 + index % 3,
                    generation=1000 * concurrency + index + 1,
                    reason=Reason(rule="bench", message="bench.topology"),
                    source="autoscale",
                    policy="goodput",
                )
                results.append(
                    app.send_task("trainscaler.scale", args=[command.model_dump(mode="json")])
                )
            _wait_done(log, len(results), timeout=120)
            time.sleep(1.0)  # let any watch a worker opened reach the server
            pids = [pid, *_children(pid)]
            rss = tuple(rss_mb(p) for p in pids)
            watches = _watches(server) - watches_before
    finally:
        app.close()
    return WorkerFigures(nodes=nodes, concurrency=concurrency, watches=watches, rss_mb=rss)


# --- the run ------------------------------------------------------------------------------


@contextmanager
def _filled(nodes: int, jobs: int, *, tmp: Path) -> Iterator[tuple[Any, Path]]:
    from trainscaler_sim.apiserver import LoopbackApiServer

    server = LoopbackApiServer(port=0, controllers=False, scheduler=False, history_limit=1000)
    server.start()
    try:
        began = time.perf_counter()
        fill(server, nodes=nodes, jobs=jobs)
        print(f"  filled {nodes} nodes, {nodes * PODS_PER_NODE} pods, {jobs} jobs "
              f"in {time.perf_counter() - began:.0f}s", flush=True)  # fmt: skip
        yield server, server.write_kubeconfig(tmp / f"kubeconfig-{nodes}-{jobs}")
    finally:
        server.stop()


def _timed(label: str, call: Callable[[], Any]) -> Any:
    print(f"{label} ...", flush=True)
    return call()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--nodes", default="100,1000,5000", help="cluster sizes, comma separated")
    parser.add_argument("--jobs", type=int, default=100, help="jobs at every size")
    parser.add_argument("--big-jobs", type=int, default=10_000, help="jobs at the largest size")
    parser.add_argument("--workers", default="1,2,4", help="scale-worker concurrencies")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [20, 200] if args.quick else [int(x) for x in args.nodes.split(",")]
    big_jobs = 400 if args.quick else args.big_jobs
    concurrencies = [int(x) for x in args.workers.split(",")]
    from workers.adapters.redis_server import EmbeddedRedis

    planner: dict[tuple[int, int], dict[str, Any]] = {}
    workers: list[WorkerFigures] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-topology-") as tmp_name,
        EmbeddedRedis(data_dir=Path(tmp_name) / "redis") as redis_server,
    ):
        tmp = Path(tmp_name)
        for nodes in sizes:
            with _filled(nodes, args.jobs, tmp=tmp) as (server, kubeconfig):
                planner[(nodes, args.jobs)] = _timed(
                    f"planner at {nodes} nodes, {args.jobs} jobs",
                    lambda: run_planner(server, kubeconfig, rounds=args.rounds, recount=True),
                )
                if nodes in (sizes[0], sizes[-1]):
                    for concurrency in concurrencies:
                        workers.append(
                            _timed(
                                f"scale workers --concurrency {concurrency} at {nodes} nodes",
                                lambda: run_workers(
                                    server, kubeconfig, redis_url=redis_server.url,
                                    nodes=nodes, concurrency=concurrency, tmp=tmp,  # noqa: B023
                                ),
                            )
                        )  # fmt: skip
        with _filled(sizes[-1], big_jobs, tmp=tmp) as (server, kubeconfig):
            planner[(sizes[-1], big_jobs)] = _timed(
                f"planner at {sizes[-1]} nodes, {big_jobs} jobs",
                lambda: run_planner(server, kubeconfig, rounds=args.rounds, recount=False),
            )
    return report(planner, workers, big=(sizes[-1], big_jobs), sizes=(sizes[0], sizes[-1]))


def report(
    planner: dict[tuple[int, int], dict[str, Any]],
    workers: list[WorkerFigures],
    *,
    big: tuple[int, int],
    sizes: tuple[int, int],
) -> int:
    print()
    print("planner (one process, from the cache)")
    print(
        f"{'nodes':>6} {'pods':>7} {'jobs':>6} {'LISTs':>6} {'watches':>7} {'RSS MB':>7} "
        f"{'read s':>7} {'goodput s':>9} {'edl s':>7} {'req/round':>9} {'recount s':>9} {'ratio':>6}"
    )
    for (nodes, jobs), f in planner.items():
        lists = f["requests_at_start"].get("GET", 0)
        recount = f.get("recount_s")
        goodput = f["goodput"]["steady_round_s"]
        read = f["goodput"]["steady_read_s"]
        requests = max(
            f["goodput"]["requests_per_steady_round"], f["edl"]["requests_per_steady_round"]
        )
        print(
            f"{nodes:>6} {nodes * PODS_PER_NODE:>7} {jobs:>6} {lists:>6} {f['watches_at_server']:>7} "
            f"{f['rss_mb_after_sync']:>7.0f} {read:>7.3f} {goodput:>9.3f} {f['edl']['steady_round_s']:>7.3f} "
            f"{requests:>9} {f'{recount:.3f}' if recount else '-':>9} "
            f"{f'{recount / read:.0f}x' if recount else '-':>6}"
            f"{'' if f.get('recount_agrees', True) else '  RECOUNT DISAGREES'}"
        )  # fmt: skip
    print()
    print("scale workers (celery -Q cluster-writes --concurrency C)")
    print(f"{'nodes':>6} {'C':>3} {'watches':>7} {'RSS MB main + children':>30}")
    for w in workers:
        print(f"{w.nodes:>6} {w.concurrency:>3} {w.watches:>7} {' '.join(f'{r:.0f}' for r in w.rss_mb):>30}")  # fmt: skip

    misses = []
    big_round = planner[big]
    for policy in ("goodput", "edl"):
        seconds = big_round[policy]["steady_round_s"]
        if seconds > ROUND_TARGET_S:
            misses.append(
                f"{policy} round {seconds:.2f}s > {ROUND_TARGET_S}s at {big[1]} jobs x {big[0]} nodes"
            )
    for (nodes, _), f in planner.items():
        for policy in ("goodput", "edl"):
            if f[policy]["requests_per_steady_round"]:
                misses.append(
                    f"{policy}: {f[policy]['requests_per_steady_round']} requests per steady round at {nodes} nodes"
                )
        if not f.get("recount_agrees", True):
            misses.append(f"the index disagrees with a recount at {nodes} nodes")
    for nodes in sorted({w.nodes for w in workers}):
        watches = {w.concurrency: w.watches for w in workers if w.nodes == nodes}
        if len(set(watches.values())) > 1:
            misses.append(f"watches vary with worker count at {nodes} nodes: {watches}")
    for concurrency in sorted({w.concurrency for w in workers}):
        small = next(w for w in workers if w.nodes == sizes[0] and w.concurrency == concurrency)
        large = next(w for w in workers if w.nodes == sizes[1] and w.concurrency == concurrency)
        if large.child_rss_mb > small.child_rss_mb * (1 + RSS_TOLERANCE):
            misses.append(
                f"scale-worker RSS {small.child_rss_mb:.0f} -> {large.child_rss_mb:.0f} MB "
                f"from {sizes[0]} to {sizes[1]} nodes (concurrency {concurrency})"
            )  # fmt: skip
    print()
    print(f"planner round at {big[1]} jobs x {big[0]} nodes: goodput {big_round['goodput']['steady_round_s']:.3f}s "
          f"(first {big_round['goodput']['first_round_s']:.3f}s), edl {big_round['edl']['steady_round_s']:.3f}s "
          f"(first {big_round['edl']['first_round_s']:.3f}s)")  # fmt: skip
    if misses:
        print("targets NOT met:")
        for miss in misses:
            print(f"  - {miss}")
        return 1
    print("targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
