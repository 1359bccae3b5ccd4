"""Root test configuration: options every suite may read."""

from __future__ import annotations

import os

import pytest

# Tests configure every connection themselves: never the connection details of an
# embedded system that happens to run on this machine (workers.discovery). Child
# processes the tests start inherit this.
os.environ["TRAINSCALER_DISCOVER"] = "false"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-cluster",
        action="store_true",
        default=False,
        help="run tests/contract against the cluster in KUBECONFIG",
    )
