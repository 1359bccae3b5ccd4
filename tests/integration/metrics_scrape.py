"""Scraping a real process's ``/metrics`` the Prometheus way, for the integration tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample at ``url`` (Prometheus text), keyed by name and sorted labels."""
    text = httpx.get(url, timeout=10).raise_for_status().text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape_until(
    url: str, check: Callable[[Samples], bool], *, timeout: float, what: str
) -> Samples:
    """The first scrape of ``url`` that passes ``check`` (fails after ``timeout``)."""

    def probe() -> Samples | None:
        try:
            samples = scrape(url)
        except httpx.TransportError:
            return None  # not listening yet
        return samples if check(samples) else None

    found = wait_for(probe, timeout=timeout, what=what)
    assert found is not None
    return found


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def metrics_env(port: int, directory: Path | None = None) -> dict[str, str]:
    env = {"TRAINSCALER_WORKER_METRICS_PORT": str(port)}
    if directory is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return env
