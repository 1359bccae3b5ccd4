"""``trainscaler run``: the product command.

Until the embedded system lands, it plans a built-in example cluster with the
``edl`` policy and prints every decision with its reason.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from scheduler_core.accounting import inquire
from scheduler_core.models import ElasticJob, Resources
from scheduler_core.policies.base import PolicyInput
from scheduler_core.registry import decide


def _example() -> tuple[list[dict[str, Any]], list[dict[str, Any]], tuple[ElasticJob, ...]]:
    nodes = [
        {
            "metadata": {"name": f"node-{i}"},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(4)
    ]
    pods = [
        {
            "metadata": {"name": f"bert-{i}", "namespace": "ml"},
            "spec": {
                "nodeName": f"node-{i}",
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "requests": {"cpu": "2", "memory": "8Gi"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
        for i in range(2)
    ]
    gpu_replica = Resources(cpu_milli=2000, memory_mega=8590, gpu=1)
    jobs = (
        ElasticJob(
            namespace="ml",
            name="bert",
            min_replicas=1,
            max_replicas=8,
            current_replicas=2,
            requests=gpu_replica,
            limits=Resources(gpu=1),
        ),
        ElasticJob(
            namespace="ml",
            name="resnet",
            min_replicas=2,
            max_replicas=6,
            current_replicas=0,
            requests=gpu_replica,
            limits=Resources(gpu=1),
        ),
        ElasticJob(
            namespace="ml",
            name="ncf",
            min_replicas=1,
            max_replicas=4,
            current_replicas=0,
            requests=Resources(cpu_milli=1000, memory_mega=2000),
        ),
    )
    return nodes, pods, jobs


def run(
    max_load_desired: float = typer.Option(
        0.97, help="EDL's load cap as a fraction of the cluster"
    ),
) -> None:
    """Run trainscaler (for now: plan a built-in example cluster and show why)."""
    nodes, pods, jobs = _example()
    cluster = inquire(nodes, pods)
    result = decide(
        "edl",
        PolicyInput(jobs=jobs, cluster=cluster),
        params={"max_load_desired": max_load_desired},
    )
    table = Table(title=f"edl plan, {cluster.node_count} nodes, {cluster.gpu_total} GPUs")
    for column in ("job", "current", "target", "rule", "reason"):
        table.add_column(column)
    for decision in result.plan.decisions:
        table.add_row(
            decision.job,
            str(decision.current),
            str(decision.target),
            decision.reason.rule,
            decision.reason.message,
        )
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command(name="run")(run)
