"""Fixtures for tests that drive the runtime's handlers in-process against a
real redis-server (started once per module on a free port) with a fixed clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from workers.adapters.redis_server import EmbeddedRedis
from workers.settings import Settings
from workers.wiring import Runtime


def round_trips(rt: Runtime, action: Callable[[], object]) -> int:
    """Requests the server read while ``action`` ran (the INFO that counts them left
    out): one per command, pipeline or script call, from any client."""

    def reads() -> int:
        return int(rt.redis.info("stats")["total_reads_processed"])

    before = reads()
    action()
    return reads() - before - 1


class FixedClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.value = now

    def now(self) -> float:
        return self.value


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(data_dir=tmp_path_factory.mktemp("redis")) as embedded:
        yield embedded


@pytest.fixture
def rt(server: EmbeddedRedis) -> Iterator[Runtime]:
    """A runtime on a flushed Redis with the recording scaler, no load cap and EDL."""
    runtime = Runtime(
        # EDL's semantics are what these tests pin down; goodput's runtime tests set it.
        Settings(
            redis_url=server.url, scaler="recording", max_load_desired=1.0, cluster_policy="edl"
        ),
        clock=FixedClock(),
    )
    runtime.redis.flushall()
    yield runtime
    runtime.redis.close()
