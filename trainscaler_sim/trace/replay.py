"""Recorded report streams: write a simulator run to a file, replay it against a policy.

A recording holds, round by round, exactly what a cluster policy was given
(the jobs, the cluster snapshot, the epoch reports since the last round and
the time) and the targets it answered. ``replay`` plays the rounds through
``scheduler_core.registry.decide`` the way the simulator's loop does (the
policy state carried from round to round), so a recording of a simulator run
replays to the simulator's targets, and a recording of a real cluster's
rounds can be replayed offline against any policy.

File format (JSON Lines, docs/simulator.md): a header line
``{"format": "trainscaler.replay/1", "policy": ..., "params": {...}, "note": ...}``
then one line per round
``{"now": s, "jobs": [ElasticJob], "cluster": ClusterResource,
"reports": [EpochReport], "targets": {job: replicas}}``.

Run ``python -m trainscaler_sim.trace.replay record --workload 1 --jobs 30 --rounds 40 --out FILE``
and ``python -m trainscaler_sim.trace.replay play FILE [--policy NAME]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.models import ClusterResource, ElasticJob, EpochReport
from scheduler_core.policies.base import PolicyInput, PolicyResult, PolicyState, in_round_order
from scheduler_core.registry import decide
from trainscaler_sim.trace.engine import DEFAULT_POLICY_PARAMS, SimConfig, simulate
from trainscaler_sim.trace.runner import default_data_dir, resolve_workloads
from trainscaler_sim.trace.traces import load_traces
from trainscaler_sim.trace.workload import load_workload

FORMAT = "trainscaler.replay/1"


class RecordingHeader(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = FORMAT
    policy: str
    params: dict[str, Any] = Field(default_factory=dict)
    note: str = ""


class RecordedRound(BaseModel):
    """One round: what the policy was given and the targets it answered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    now: float
    jobs: tuple[ElasticJob, ...] = ()
    cluster: ClusterResource = ClusterResource()
    reports: tuple[EpochReport, ...] = ()
    targets: dict[str, int] = Field(default_factory=dict)


@dataclass(frozen=True)
class Recording:
    header: RecordingHeader
    rounds: tuple[RecordedRound, ...]

    def write(self, path: Path) -> None:
        """JSON Lines; gzip-compressed when the name ends in ``.gz``."""
        lines = [self.header.model_dump_json()]
        lines += [r.model_dump_json() for r in self.rounds]
        data = ("\n".join(lines) + "\n").encode()
        # mtime 0: the same recording always gives the same bytes.
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)

    @classmethod
    def read(cls, path: Path) -> Recording:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError(f"{path}: empty recording")
        header = RecordingHeader.model_validate_json(lines[0])
        if header.format != FORMAT:
            raise ValueError(f"{path}: format {header.format!r}, expected {FORMAT!r}")
        return cls(header, tuple(RecordedRound.model_validate_json(line) for line in lines[1:]))


class _StopRecording(Exception):
    """Enough rounds recorded."""


def record(
    workload: Path,
    *,
    data_dir: Path,
    policy: str = "goodput",
    jobs: int | None = None,
    rounds: int | None = None,
    config: SimConfig | None = None,
) -> Recording:
    """Simulate the first ``jobs`` jobs of ``workload`` and keep the first ``rounds`` rounds."""
    specs = load_workload(workload)[:jobs]
    traces = load_traces(data_dir, {s.application for s in specs})
    params = dict(DEFAULT_POLICY_PARAMS.get(policy, {}))
    kept: list[RecordedRound] = []

    def observe(now: float, request: PolicyInput, result: PolicyResult[Any]) -> None:
        if rounds is not None and len(kept) >= rounds:
            raise _StopRecording
        kept.append(
            RecordedRound(
                now=now,
                jobs=request.jobs,
                cluster=request.cluster,
                reports=request.reports,
                targets=result.plan.targets(),
            )
        )

    with contextlib.suppress(_StopRecording):
        simulate(specs, traces, policy=policy, params=params, config=config, observer=observe)
    note = f"{workload.name}: first {len(specs)} jobs, {len(kept)} rounds"
    return Recording(RecordingHeader(policy=policy, params=params, note=note), tuple(kept))


def replay(
    rounds: Sequence[RecordedRound],
    *,
    policy: str,
    params: Mapping[str, Any] | None = None,
) -> list[dict[str, int]]:
    """Each round's targets when ``policy`` is given the recorded rounds in turn."""
    state: PolicyState | None = None
    out: list[dict[str, int]] = []
    for recorded in rounds:
        result = decide(
            policy,
            PolicyInput(
                jobs=recorded.jobs,
                cluster=recorded.cluster,
                reports=in_round_order(recorded.reports),
                now=recorded.now,
            ),
            state=state,
            params=dict(params or {}),
        )
        state = result.state
        out.append(result.plan.targets())
    return out


def targets_by_job(rounds: Sequence[Mapping[str, int]]) -> dict[str, list[int]]:
    """Per job, its target in every round it was planned in, in round order."""
    by_job: dict[str, list[int]] = {}
    for targets in rounds:
        for job, target in targets.items():
            by_job.setdefault(job, []).append(target)
    return by_job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="simulate a workload and write its rounds")
    rec.add_argument("--workload", default="1")
    rec.add_argument("--data-dir", type=Path, default=default_data_dir())
    rec.add_argument("--policy", default="goodput")
    rec.add_argument("--jobs", type=int, default=None)
    rec.add_argument("--rounds", type=int, default=None)
    rec.add_argument("--out", type=Path, required=True)
    play = sub.add_parser("play", help="replay a recording against a policy")
    play.add_argument("file", type=Path)
    play.add_argument("--policy", default=None, help="default: the recording's policy")
    args = parser.parse_args(argv)
    if args.command == "record":
        path = resolve_workloads(args.workload, args.data_dir)[0]
        recording = record(
            path, data_dir=args.data_dir, policy=args.policy, jobs=args.jobs, rounds=args.rounds
        )
        recording.write(args.out)
        print(f"{args.out}: {recording.header.note}")
        return 0
    recording = Recording.read(args.file)
    policy = args.policy or recording.header.policy
    params = recording.header.params if policy == recording.header.policy else {}
    replayed = replay(recording.rounds, policy=policy, params=params)
    same = sum(1 for r, t in zip(recording.rounds, replayed, strict=True) if r.targets == t)
    for index, (recorded, targets) in enumerate(zip(recording.rounds, replayed, strict=True)):
        print(json.dumps({"round": index, "now": recorded.now, "targets": targets}))
    print(f"{same}/{len(replayed)} rounds with the recorded targets", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
