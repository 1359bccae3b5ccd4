"""Beat failover: kill -9 the beat holding RedBeat's lock; the other takes over.

Two beat processes, one worker. The beat that sends (it holds the lock) is
killed with SIGKILL; the other must send within the lock timeout (the
dead holder's lock expires, the waiting beat acquires it), and across both
beats' logs no periodic task is ever sent twice within one interval.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
from datetime import datetime

import pytest

from tests.integration.conftest import PREFIX, Proc, Procs, settings_for, wait_for
from tests.integration.test_runtime_beat import _cluster
from workers.adapters.static_cluster import StaticClusterReader
from workers.beat_schedule import redbeat_lock_timeout

pytestmark = pytest.mark.timeout(180)

INTERVAL = 2.0
BEAT_ENV = {
    "TRAINSCALER_LOG_FORMAT": "json",
    "TRAINSCALER_AUTOSCALE_INTERVAL": str(INTERVAL),
    "TRAINSCALER_LEASE_SWEEP_INTERVAL": str(INTERVAL),
}
SENDING = "Scheduler: Sending due task "


def _sends(beat: Proc) -> list[tuple[float, str]]:
    """(time, entry) of every periodic task this beat sent, from its JSON log."""
    sent = []
    for line in beat.log_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = str(record.get("message", ""))
        if message.startswith(SENDING):
            at = datetime.fromisoformat(record["ts"]).timestamp()
            sent.append((at, message.removeprefix(SENDING).split(" ")[0]))
    return sent


def test_killing_the_lock_holder_hands_beat_over_within_the_lock_timeout(
    procs: Procs, redis_client, runtime_env: dict[str, str]
) -> None:
    StaticClusterReader(redis_client, prefix=PREFIX).store(_cluster(2))
    lock_timeout = redbeat_lock_timeout(settings_for({**runtime_env, **BEAT_ENV}))
    procs.worker("w1", extra_env=BEAT_ENV)
    beats = [procs.beat("b1", extra_env=BEAT_ENV), procs.beat("b2", extra_env=BEAT_ENV)]
    found = wait_for(
        lambda: next((b for b in beats if len(_sends(b)) >= 6), None),
        timeout=60,
        what="a beat sending (the lock holder)",
    )
    assert found is not None
    holder: Proc = found
    standby = next(b for b in beats if b is not holder)
    assert _sends(standby) == [], "only the lock holder sends"

    killed_at = time.time()
    holder.kill9()
    wait_for(lambda: _sends(standby), timeout=lock_timeout + 30, what="the standby sending")
    # Keep both logs going a few more intervals after the takeover.
    wait_for(lambda: len(_sends(standby)) >= 9, timeout=60, what="the standby's next rounds")
    standby.stop()

    before, after = _sends(holder), _sends(standby)
    took_over = min(at for at, _ in after) - killed_at
    print(f"beat failover: lock timeout {lock_timeout}s, took over after {took_over:.2f}s")
    # The lock expires at most lock_timeout after the holder's last extension
    # (before the kill); the standby polls it every 0.1 s, then starts its
    # scheduler and sends on its first tick: a few seconds of slack for that
    # start on a loaded machine, far below a second lock timeout.
    assert took_over <= lock_timeout + 3.0, took_over
    assert max(at for at, _ in before) <= killed_at + 0.5, "the killed beat sent no more"
    per_entry: dict[str, list[float]] = defaultdict(list)
    for at, entry in sorted(before + after):
        per_entry[entry].append(at)
    assert set(per_entry) == {"autoscale", "sweep-leases"}
    for entry, times in per_entry.items():
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        # Never twice in one interval (a tick of slack for the scheduler's loop).
        assert min(gaps) >= INTERVAL - 0.5, (entry, gaps)
