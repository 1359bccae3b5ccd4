"""Lua script calls on a pipeline, without redis-py's extra round trip.

redis-py's ``Pipeline.execute`` first sends ``SCRIPT EXISTS`` for every script
queued on it through ``Script.__call__``: one more round trip on every
execute (twice per ``schedule`` run on a report's path). ``execute`` here
skips that check and handles the rare ``NOSCRIPT`` instead (a restart or a
failover emptied the server's script cache): it loads the scripts and sends
again those calls, and only those, in their order. Nothing else of the
pipeline runs twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError


def call_in(pipe: Any, script: Any, *, keys: Sequence[Any], args: Sequence[Any]) -> None:
    """Queue one call of ``script`` (``register_script``'s) on ``pipe``: an ``EVALSHA``."""
    script(keys=list(keys), args=list(args), client=pipe)


def execute(client: redis.Redis, pipe: Any, *, then: Sequence[Sequence[Any]] = ()) -> list[Any]:
    """``pipe.execute()`` without ``SCRIPT EXISTS`` first; script calls the server did
    not know are loaded and sent again. Raises the first error, as ``execute`` does.

    ``then``: commands that must follow the pipeline's writes on the same
    connection (``WAIT``): appended to it, and sent again after any resent
    calls; their results (from the last sending) end the list.
    """
    for command in then:
        pipe.execute_command(*command)
    # redis-py checks these before every execute; NOSCRIPT is handled below instead.
    scripts: dict[str, Script] = {script.sha: script for script in pipe.scripts}
    pipe.scripts.clear()
    sent = [args for args, _ in pipe.command_stack]
    results: list[Any] = pipe.execute(raise_on_error=False)
    missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
    if missing:
        for sha in {str(sent[i][1]) for i in missing}:
            client.script_load(scripts[sha].script)
        again: Any = client.pipeline(transaction=False)
        for i in missing:
            again.execute_command(*sent[i])
        for command in then:
            again.execute_command(*command)
        resent = again.execute(raise_on_error=False)
        for i, result in zip(missing, resent[: len(missing)], strict=True):
            results[i] = result
        if then:
            results[-len(then) :] = resent[-len(then) :]
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results
