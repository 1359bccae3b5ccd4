"""The planner side of ``bench.topology``: one process holding the cluster view.

Run by ``bench.topology`` as ``python -m bench.topology_planner KUBECONFIG``:
builds one ``KubeAdapter`` (as the planner role holds it), waits for its
cache, then times autoscale rounds from the cache (the reader's jobs and
snapshot, then the cluster policy) for goodput and for edl, counting the API
requests it makes. ``--recount`` also times the round as the reader did it
before the incremental index (``inquire`` over every pod, a scan of each
job's pods) and checks both agree. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from scheduler_core.accounting import inquire
from scheduler_core.models import ClusterResource, ElasticJob
from scheduler_core.policies.base import PolicyInput
from scheduler_core.registry import decide, load_state
from workers.adapters.kubernetes import KubeAdapter
from workers.adapters.kubernetes.jobs import (
    elastic_job,
    namespace_and_name,
    pods_of,
    view_of_workload,
)
from workers.adapters.kubernetes.kinds import DEPLOYMENTS, ELASTICJOBS, NODES, PODS
from workers.scaling import cluster_params
from workers.settings import Settings


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


RECOUNT_RETRIES = 3


def _recount_round(
    adapter: KubeAdapter, settings: Settings
) -> tuple[ClusterResource, list[ElasticJob]]:
    """The reader's round before the incremental index: every pod, every round."""
    cache = adapter.cache
    pods = cache.informer(PODS).list()
    cluster = inquire(cache.informer(NODES).list(), pods, gpu_resource=settings.gpu_resource)
    by_namespace: dict[str, list[Any]] = defaultdict(list)
    for pod in pods:
        by_namespace[namespace_and_name(pod)[0]].append(pod)
    jobs = []
    for resource in sorted(cache.informer(ELASTICJOBS).list(), key=namespace_and_name):
        namespace, name = namespace_and_name(resource)
        workload = cache.informer(DEPLOYMENTS).get(namespace, name)
        if workload is None:
            continue
        view = view_of_workload(workload)
        target_pods = pods_of(view, namespace, pods=by_namespace[namespace])
        jobs.append(
            elastic_job(
                resource,
                view,
                target_pods=target_pods,
                gpu_resource=settings.gpu_resource,
                default_policy=settings.cluster_policy,
            )
        )
    return cluster, jobs


def planner_child(kubeconfig: str, *, rounds: int, recount: bool) -> dict[str, Any]:
    requests: Counter[str] = Counter()
    rss_before = rss_mb()
    settings = Settings(
        kubeconfig=kubeconfig, kube_qps=1000, kube_burst=1000, kube_cache_sync_timeout=900
    )
    adapter = KubeAdapter(settings, observe=lambda verb, code: requests.update([verb]))
    reader = adapter.cluster_reader()
    started = time.perf_counter()
    reader.inquire()  # starts the cache and waits for every first LIST
    sync_s = time.perf_counter() - started
    # Each informer opens its WATCH right after its first LIST: let those land
    # before the rounds, so a round's count is only what the round asks.
    informers = len(adapter.cache.informers)
    deadline = time.monotonic() + 60
    while requests["WATCH"] < informers and time.monotonic() < deadline:
        time.sleep(0.05)
    at_start = dict(requests)
    out: dict[str, Any] = {
        "sync_s": sync_s,
        "requests_at_start": at_start,
        "rss_mb_after_sync": rss_mb(),
        "rss_mb_before": rss_before,
    }
    for policy in ("goodput", "edl"):
        state = load_state(policy, None)
        times = []
        reads = []
        steady_requests = []
        planned = 0
        for _ in range(rounds):
            before = sum(requests.values())
            began = time.perf_counter()
            jobs = tuple(reader.elastic_jobs())
            cluster = reader.inquire()
            read_s = time.perf_counter() - began
            # As autoscale_once: the cluster policy plans its own jobs (with
            # TRAINSCALER_CLUSTER_POLICY=edl, every job is edl's).
            candidates = jobs if policy == "edl" else tuple(j for j in jobs if j.policy == policy)
            result = decide(
                policy,
                PolicyInput(jobs=candidates, cluster=cluster, now=time.time()),
                state=state,
                params=cluster_params(policy, settings),
            )
            state = result.state
            times.append(time.perf_counter() - began)
            reads.append(read_s)
            steady_requests.append(sum(requests.values()) - before)
            planned = len(candidates)
        out[policy] = {
            "first_round_s": times[0],
            "steady_round_s": statistics.median(times[1:]) if len(times) > 1 else times[0],
            "steady_read_s": statistics.median(reads[1:]) if len(reads) > 1 else reads[0],
            "requests_per_steady_round": max(steady_requests[1:], default=steady_requests[0]),
            "jobs": len(jobs),
            "planned": planned,
        }
    if recount:
        began = time.perf_counter()
        recounted, recounted_jobs = _recount_round(adapter, settings)
        out["recount_s"] = time.perf_counter() - began
        agrees = recounted == reader.inquire() and recounted_jobs == list(reader.elastic_jobs())
        # A watch event landing between the recount and the index read (the
        # loopback server's controllers may still be settling 50k pods) makes
        # them differ for a moment: a wrong index keeps differing, so ask again.
        for _ in range(RECOUNT_RETRIES):
            if agrees:
                break
            time.sleep(1.0)
            recounted, recounted_jobs = _recount_round(adapter, settings)
            agrees = recounted == reader.inquire() and recounted_jobs == list(reader.elastic_jobs())
        out["recount_agrees"] = agrees
    out["rss_mb_after_rounds"] = rss_mb()
    adapter.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("kubeconfig")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recount", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(planner_child(args.kubeconfig, rounds=args.rounds, recount=args.recount)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
