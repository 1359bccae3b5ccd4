"""Every Lua script takes all its keys through KEYS, under one hash tag (issue 16, Deliver 3).

* Statically: each script the runtime registers is read (``lua_keys``): no key
  is built with ``..`` or from ARGV; and every Lua text in the source tree is
  part of a registered script, so none escapes the check.
* Dynamically: every script runs, through each of its paths, against a
  ``cluster-enabled`` redis-server (one node holding all 16384 slots) with a
  guard that fails the script on any key not given in KEYS. Redis Cluster
  itself refuses declared keys of different slots (CROSSSLOT), so together: every
  key a script touches is declared, and all of them hash to one slot.
"""

from __future__ import annotations

import ast
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis

from scheduler_core.models import EpochReport, Reason, Resources, ScalingDecision
from tests.integration.lua_keys import guarded, static_violations
from tests.unit.builders import scale_request
from workers.adapters.job_retention import JobRetention
from workers.adapters.recording_scaler import FaultInjector, RecordingScaler
from workers.adapters.redis_keys import DEFAULT_KEY_PREFIX, hash_tag
from workers.adapters.redis_queue import TRAIN, WAIT, RedisSchedulerQueue
from workers.adapters.redis_server import EmbeddedRedis, free_port
from workers.adapters.report_intake import ReportIntake
from workers.adapters.script_pipeline import execute
from workers.adapters.state_store import (
    AppliedTarget,
    DecisionRecord,
    ScheduleCursor,
    ScheduleWrite,
    StateStore,
)
from workers.wiring import SystemClock

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
SLOTS = 16384


class RecordingScripts:
    """Wraps ``register_script``: keeps each script's text and whether it ran."""

    def __init__(self, *, guard: bool) -> None:
        self.guard = guard
        self.sources: dict[str, str] = {}
        self.ran: set[str] = set()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = redis.Redis.register_script
        recorder = self

        def register(client: redis.Redis, script: Any) -> Any:
            source = script.decode() if isinstance(script, bytes) else str(script)
            registered = original(client, guarded(source) if recorder.guard else source)
            name = f"script {len(recorder.sources) + 1}"
            recorder.sources[name] = source

            class Tracked:
                def __call__(self, *args: Any, **kwargs: Any) -> Any:
                    recorder.ran.add(name)
                    return registered(*args, **kwargs)

            return Tracked()

        monkeypatch.setattr(redis.Redis, "register_script", register)


class Owners(NamedTuple):
    """Everything in the runtime that registers a Lua script."""

    store: StateStore
    queue: RedisSchedulerQueue
    scaler: RecordingScaler
    retention: JobRetention
    intake: ReportIntake


def _owners(client: redis.Redis) -> Owners:
    faults = FaultInjector(client, prefix=DEFAULT_KEY_PREFIX, enabled=False)
    store = StateStore(client, prefix=DEFAULT_KEY_PREFIX)
    queue = RedisSchedulerQueue(client, prefix=DEFAULT_KEY_PREFIX, max_length=100)
    return Owners(
        store=store,
        queue=queue,
        scaler=RecordingScaler(
            client, prefix=DEFAULT_KEY_PREFIX, clock=SystemClock(), faults=faults
        ),
        retention=JobRetention(store, retention=10.0),
        intake=ReportIntake(client, queue=queue, store=store),
    )


def _lua_texts() -> list[tuple[str, str]]:
    """Every string literal in the runtime and benchmark sources that calls Redis from Lua."""
    found = []
    for folder in ("workers", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                if "redis.call" in node.value or "redis.pcall" in node.value:
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.value))
    return found


def test_no_script_builds_a_key_and_none_escapes_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scripts = RecordingScripts(guard=False)
    scripts.install(monkeypatch)
    _owners(redis.Redis())  # registering contacts no server
    assert scripts.sources, "no script registered: the recorder saw nothing"
    problems = {name: static_violations(src) for name, src in scripts.sources.items()}
    assert {name: p for name, p in problems.items() if p} == {}
    registered = "\n".join(scripts.sources.values())
    unchecked = [where for where, text in _lua_texts() if text.strip() not in registered]
    assert unchecked == [], (
        "Lua outside the registered scripts: construct its owner in _owners() "
        f"and exercise it in _exercise(): {unchecked}"
    )


@pytest.mark.parametrize(
    "script",
    [
        "return redis.call('GET', ARGV[1])",
        "local p = ARGV[1]\nreturn redis.call('LLEN', p .. 'queue:train')",
        "local key, n = ARGV[1], 1\nreturn redis.call('INCRBY', key, n)",
        "local function get(key) return redis.call('GET', key) end\nreturn get(KEYS[1] .. ':x')",
        "return redis.call(ARGV[1], KEYS[1])",
    ],
)
def test_the_static_check_catches_keys_built_in_the_script(script: str) -> None:
    assert static_violations(script)


def _cluster_port() -> int:
    """A free port whose cluster bus port (10000 higher, redis 6.2) is free too."""
    for _ in range(200):
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    data = tmp_path_factory.mktemp("cluster")
    server = EmbeddedRedis(
        data_dir=data,
        port=_cluster_port(),
        extra_args=(
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(data / "nodes.conf"),
        ),
    )  # fmt: skip
    with server:
        client = redis.Redis.from_url(server.url)
        client.execute_command("CLUSTER", "ADDSLOTS", *range(SLOTS))
        deadline = time.monotonic() + 30
        while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
            assert time.monotonic() < deadline, "cluster state not ok within 30 s"
            time.sleep(0.05)
        client.close()
        yield server


@pytest.fixture
def cluster_client(cluster_node: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(cluster_node.url)
    client.flushall()
    yield client
    client.close()


def test_the_cluster_node_refuses_keys_of_two_slots(cluster_client: redis.Redis) -> None:
    """The oracle can fail: declared keys in two slots are refused."""
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):  # CROSSSLOT
        cluster_client.eval("return 1", 2, "a", "b")
    cluster_client.eval("return 1", 2, "{t}a", "{t}b")


def test_the_guard_refuses_an_undeclared_key(
    cluster_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = RecordingScripts(guard=True)
    scripts.install(monkeypatch)
    script = cluster_client.register_script("return redis.call('GET', KEYS[1] .. 'x')")
    with pytest.raises(redis.ResponseError, match="UNDECLARED"):
        script(keys=[f"{DEFAULT_KEY_PREFIX}a"])


def _report(job: str, epoch: int) -> EpochReport:
    return EpochReport(job=job, epoch=epoch, epoch_time_s=10.0, replicas=2)


def _exercise(owners: Owners, client: redis.Redis) -> None:
    """Every script, through each of its paths."""
    store, queue, scaler = owners.store, owners.queue, owners.scaler
    job, other = "team/a", "team/b"
    queue.push_entry(TRAIN, job, payload={"n": 1}, now=1.0)
    queue.push_entry(TRAIN, job, payload={"n": 2}, now=1.5)  # merged into the pending item
    queue.push_and_wake(
        WAIT,
        other,
        payload={"n": 3},
        now=2.0,
        wake_key=store.key("schedule:triggered"),
        wake_ttl=5.0,
    )
    first = queue.pop_delivery(lease_seconds=10, now=3.0)
    assert first is not None and first.item_id == job and len(first.entries) == 2
    queue.push_entry(TRAIN, job, payload={"n": 4}, now=3.5)  # while in flight: skipped by pop
    second = queue.pop_delivery(lease_seconds=10, now=4.0)
    assert second is not None and second.item_id == other
    assert queue.nack_delivery(second)
    assert queue.return_expired(now=20.0) == 1  # the first delivery's lease ran out
    again = queue.pop_deliveries(lease_seconds=10, now=21.0, count=5)
    assert [d.item_id for d in again] == [job, other]
    assert [e.data["n"] for e in again[0].entries] == [1, 2, 4]
    assert queue.ack_deliveries(again) == [True, True]
    # The acks that go with a compare-and-set: on a condition (a key's value), or none.
    reply_key = store.key("reply:conditional")
    queue.push_entry(TRAIN, job, payload={"n": 6}, now=21.5)
    queue.push_entry(TRAIN, other, payload={"n": 7}, now=21.6)
    conditional, plain = queue.pop_deliveries(lease_seconds=10, now=21.7, count=5)
    client.set(store.cursor_key(job), "written")
    pipe = client.pipeline(transaction=False)
    queue.queue_ack_if(
        pipe, conditional, answer="a", answer_ttl=5.0, cursor=(store.cursor_key(job), "other")
    )
    queue.queue_ack_if(
        pipe, conditional, answer="a", answer_ttl=5.0, cursor=(store.cursor_key(job), "written")
    )
    queue.queue_ack_if(pipe, plain, answer=None, answer_ttl=5.0)
    assert execute(client, pipe)[::2] == [0, 1, 1]
    assert client.llen(reply_key) == 0  # no entry waited on it
    queue.push_entry(WAIT, job, payload={"n": 5}, now=22.0)
    assert queue.remove(job) == 1
    assert queue.depths() == {TRAIN: 0, WAIT: 0}

    # A report's one call: numbered, kept, queued with its reply key, trigger claimed.
    reporter = "team/c"
    flag = store.key("schedule:report-trigger")
    reply_key = store.key("reply:exercise")
    pushed = owners.intake.push(
        EpochReport(job=reporter, epoch_time_s=5.0, replicas=1),
        now=23.0, keep=10, wake_key=flag, wake_ttl=5.0, reply_to=reply_key,
    )  # fmt: skip
    assert (pushed.report.epoch, pushed.merged, pushed.woke) == (1, False, True)
    first_contact = owners.intake.push(
        EpochReport(job=reporter, replicas=1), now=23.5, keep=10, wake_key=flag, wake_ttl=5.0
    )
    assert (first_contact.report.epoch, first_contact.merged, first_contact.woke) == (
        None, True, False,
    )  # fmt: skip
    entries = queue.pending_entries(TRAIN, reporter)
    assert [e.reply_to for e in entries] == [reply_key, None]
    assert queue.remove(reporter) == 1

    reason = Reason(rule="test", message="exercise")
    decision = ScalingDecision(job=job, current=1, target=2, reason=reason)
    record = DecisionRecord(generation=1, at=1.0, source="schedule", decision=decision)
    snapshot = store.read_schedule([(job, "throughput")])[0]
    write = ScheduleWrite(
        state="{}",
        cursor=ScheduleCursor(last_seq=1),
        record=record,
        newest_report=_report(job, 1),
        for_cluster=(_report(job, 1),),
        scales=True,
        scale_lock="t",  # the scale lock taken for the scale, in the same step
        scale_lock_ttl_ms=5000,
    )
    assert store.write_schedule([(snapshot, write)]) == [True]
    assert store.write_schedule([(snapshot, write)]) == [False]  # the state moved on
    locked = store.begin_scales([(job, "t"), (other, "t")], ttl=5.0)
    assert [entry[0] for entry in locked] == [True, True]
    applied = AppliedTarget(generation=1, target=2, at=2.0, outcome="applied")
    store.finish_scales([(job, "t", applied), (other, "t", None)])
    assert store.generation_and_applied(job) == (1, applied)
    store.settle_scale(job, generation=1)
    round_ = store.read_cluster_round("goodput", limit=10)
    assert store.commit_cluster_round(round_, "{}")
    client.hset(
        store.key("capacity:free"), mapping={"cpu_milli": 1000, "memory_mega": 1000, "gpu": 4}
    )
    assert store.reserve(Resources(gpu=1), 2).granted == 2
    store.append_metrics([_report(job, 1), _report(job, 1)], keep=10)
    assert len(store.metrics(job)) == 1
    numbered = getattr(store, "numbered", None)
    if callable(numbered):
        numbered(_report(job, 7))
    scaler.scale(scale_request(job, 3, reason="test"))
    scaler.scale(scale_request(job, 3, reason="test"))  # confirmed only
    owners.retention.retire(job, at=100.0)
    assert owners.retention.purge(now=105.0) == 0
    assert owners.retention.purge(now=111.0) == 1


def test_every_script_runs_on_a_cluster_node_with_only_declared_keys(
    cluster_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert hash_tag(DEFAULT_KEY_PREFIX) is not None
    scripts = RecordingScripts(guard=True)
    scripts.install(monkeypatch)
    _exercise(_owners(cluster_client), cluster_client)
    assert set(scripts.sources) - scripts.ran == set(), (
        "registered but never run by _exercise(): "
        f"{[scripts.sources[n][:200] for n in set(scripts.sources) - scripts.ran]}"
    )
    keys = [k.decode() for k in cluster_client.scan_iter(count=1000)]
    assert keys and all(k.startswith(DEFAULT_KEY_PREFIX) for k in keys), keys
