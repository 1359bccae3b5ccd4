"""Root test configuration: options every suite may read."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-cluster",
        action="store_true",
        default=False,
        help="run tests/contract against the cluster in KUBECONFIG",
    )
