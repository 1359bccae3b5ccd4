"""``GET /health`` checks: Redis answers, and the cluster answers.

A probe is a call that raises when its part is unreachable. Each runs off
the event loop with a time limit, so a hung connection makes the check fail
instead of the request hang.
"""

from __future__ import annotations

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

        def kube_probe() -> None:
            # The process's one Kubernetes client (and token bucket), as every reader's.
            rt.kube.client.request("GET", "/version")

        return kube_probe

    def reader_probe() -> None:
        rt.cluster_reader.inquire()

    return reader_probe


def default_probes(settings: Settings, rt: Runtime) -> dict[str, Probe]:
    return {"redis": redis_probe(rt), "cluster": cluster_probe(settings, rt)}
