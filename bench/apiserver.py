"""Benchmark of the loopback apiserver: request latency as the store grows.

Measures median GET, PATCH and paged LIST latency through the official client
with a small and a large number of stored objects, and reports the ratios; a
flat design keeps them near 1. Run: ``python -m bench.apiserver [--large 5000]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from trainscaler_sim.apiserver import LoopbackApiServer

NAMESPACE = "bench"


def median_seconds(call: Callable[[], Any], *, samples: int) -> float:
    durations = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        durations.append(time.perf_counter() - started)
    return statistics.median(durations)


def measure(core: Any, *, samples: int) -> dict[str, float]:
    return {
        "get": median_seconds(
            lambda: core.read_namespaced_config_map("cm-5", NAMESPACE), samples=samples
        ),
        "patch": median_seconds(
            lambda: core.patch_namespaced_config_map("cm-5", NAMESPACE, {"data": {"k": "v"}}),
            samples=samples,
        ),
        "list_limit_10": median_seconds(
            lambda: core.list_namespaced_config_map(NAMESPACE, limit=10), samples=samples
        ),
    }


def fill(server: LoopbackApiServer, start: int, *, stop: int) -> None:
    """Create objects in-process: the benchmark is about serving, not populating."""
    configmaps = server.operations.resource("", "v1", plural="configmaps")
    for index in range(start, stop):
        server.operations.create_stored(
            configmaps,
            {"metadata": {"name": f"cm-{index}"}, "data": {"i": str(index)}},
            namespace=NAMESPACE,
        )


def run(*, small: int, large: int, samples: int) -> dict[str, Any]:
    with LoopbackApiServer(port=0, controllers=False, scheduler=False) as server:
        core: Any = client.CoreV1Api(server.api_client())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        fill(server, 0, stop=small)
        at_small = measure(core, samples=samples)
        fill(server, small, stop=large)
        at_large = measure(core, samples=samples)
    return {
        "objects": {"small": small, "large": large},
        "median_ms_small": {k: round(v * 1000, 3) for k, v in at_small.items()},
        "median_ms_large": {k: round(v * 1000, 3) for k, v in at_large.items()},
        "ratio_large_over_small": {k: round(at_large[k] / at_small[k], 2) for k in at_small},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--large", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    print(json.dumps(run(small=args.small, large=args.large, samples=args.samples), indent=2))


if __name__ == "__main__":
    main()
