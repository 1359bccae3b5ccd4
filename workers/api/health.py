"""``GET /health`` checks: Redis answers, and the cluster answers.

A probe is a call that raises when its part is unreachable. Each runs off
the event loop with a time limit, so a hung connection makes the check fail
instead of the request hang.
"""

from __future__ import annotations

import importlib
from functools import cache

from workers.api.context import Probe
from workers.settings import Settings
from workers.wiring import Runtime

PROBE_TIMEOUT_S = 3.0


def redis_probe(rt: Runtime) -> Probe:
    def probe() -> None:
        if not rt.redis.ping():
            raise ConnectionError("PING got no PONG")

    return probe


def cluster_probe(settings: Settings, rt: Runtime) -> Probe:
    """Kubernetes: ``GET /version`` on the API server; otherwise the cluster reader."""
    if settings.scaler == "kubernetes":

        @cache
        def client() -> object:
            # Imported lazily, as workers.wiring does: only Kubernetes setups need it.
            module = importlib.import_module("workers.adapters.kubernetes.client")
            return module.build_kube_client(settings)

        def kube_probe() -> None:
            kube = client()
            kube.request("GET", "/version")  # type: ignore[attr-defined]

        return kube_probe

    def reader_probe() -> None:
        rt.cluster_reader.inquire()

    return reader_probe


def default_probes(settings: Settings, rt: Runtime) -> dict[str, Probe]:
    return {"redis": redis_probe(rt), "cluster": cluster_probe(settings, rt)}
