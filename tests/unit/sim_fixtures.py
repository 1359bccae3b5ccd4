"""A tiny hand-made trace folder for simulator tests (numbers easy to add up).

Application ``toy``: at global batch 64 one replica takes exactly 1 s per
iteration, two replicas on one node 0.6 s; two epochs of 100 iterations each.
Application ``short``: one replica 0.25 s per iteration, one epoch of 100.
"""

from __future__ import annotations

from pathlib import Path

TOY_PLACEMENTS = """placement,local_bsz,step_time,sync_time
1,32,0.5,0.0
1,64,1.0,0.0
2,16,0.4,0.1
2,32,0.6,0.1
11,16,0.5,0.2
11,32,0.7,0.2
"""
SHORT_PLACEMENTS = """placement,local_bsz,step_time,sync_time
1,32,0.125,0.0
1,64,0.25,0.0
2,32,0.25,0.1
"""
HEADER_SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"


def write_app(root: Path, name: str, placements: str, validation: dict[int, list[int]]) -> None:
    folder = root / "traces" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "placements.csv").write_text(placements)
    (folder / "scalability.csv").write_text(HEADER_SCALABILITY)
    for batch, iterations in validation.items():
        rows = "".join(f"{i},{i},0.5,1.0,1.0\n" for i in iterations)
        (folder / f"validation-{batch}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n" + rows
        )


def write_data(root: Path) -> Path:
    write_app(root, "toy", TOY_PLACEMENTS, {64: [100, 200], 32: [200, 400]})
    write_app(root, "short", SHORT_PLACEMENTS, {64: [100]})
    (root / "workloads").mkdir(parents=True, exist_ok=True)
    return root


def write_workload(root: Path, name: str, rows: list[tuple[str, float, str, int, int]]) -> Path:
    path = root / "workloads" / name
    lines = ["name,time,application,num_replicas,batch_size"]
    lines += [f"{n},{t},{a},{r},{b}" for n, t, a, r, b in rows]
    path.write_text("\n".join(lines) + "\n")
    return path
