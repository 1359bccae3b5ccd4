"""Lua script calls on a pipeline, without redis-py's extra round trip.

redis-py's ``Pipeline.execute`` first sends ``SCRIPT EXISTS`` for every script
queued on it through ``Script.__call__``: one more round trip on every
execute (twice per ``schedule`` run on a report's path). Here a script call is
queued as a plain ``EVALSHA`` (``call_in``), and ``execute`` handles the rare
``NOSCRIPT`` (a restart or a failover emptied the server's script cache): it
loads the scripts and sends again those calls, and only those, in their order.
Nothing else of the pipeline runs twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def call_in(pipe: Any, script: Script, *, keys: Sequence[Any], args: Sequence[Any]) -> None:
    """Queue one call of ``script`` on ``pipe`` as ``EVALSHA``."""
    pipe.evalsha(script.sha, len(keys), *keys, *args)


def execute(client: redis.Redis, pipe: Any, scripts: Iterable[Script]) -> list[Any]:
    """``pipe.execute()``, its script calls the server did not know loaded and sent again.

    ``scripts``: those ``call_in`` queued on ``pipe``. Raises the first error
    of the pipeline's commands, as ``execute`` does.
    """
    sent = [args for args, _ in pipe.command_stack]
    results: list[Any] = pipe.execute(raise_on_error=False)
    missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
    if missing:
        by_sha = {script.sha: script for script in scripts}
        for sha in {str(sent[i][1]) for i in missing}:
            client.script_load(by_sha[sha].script)
        again: Any = client.pipeline(transaction=False)
        for i in missing:
            again.execute_command(*sent[i])
        for i, result in zip(missing, again.execute(raise_on_error=False), strict=True):
            results[i] = result
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results
