"""docs/runtime.md lists every Celery task with its exact arguments and a working example.

The oracle is the registered tasks' signatures (``inspect``), not the docs'
own text: a task added, renamed or given other arguments fails here until
the docs say so.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from workers.celery_app import app
from workers.tasks import call_form, task_signature

DOC = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"
CALL = re.compile(r"^\| `(trainscaler\.[a-z_]+\([a-z_, ]*\))` \|", re.MULTILINE)


def _registered() -> dict[str, str]:
    import workers.tasks  # noqa: F401  (registers the tasks)

    return {
        name: call_form(name, task.run)
        for name, task in app.tasks.items()
        if name.startswith("trainscaler.")
    }


def _section() -> str:
    text = DOC.read_text()
    return text.split("## Calling the tasks", 1)[1].split("\n## ", 1)[0]


def test_every_task_is_documented_with_its_exact_arguments() -> None:
    documented = sorted(CALL.findall(_section()))
    assert documented == sorted(_registered().values())


def _examples() -> list[list[str]]:
    return [
        shlex.split(line)
        for line in _section().splitlines()
        if line.startswith("celery -A workers call ")
    ]


def test_every_task_has_an_example_celery_call() -> None:
    named = {argv[4] for argv in _examples()}
    assert named == set(_registered())


@pytest.mark.parametrize("argv", _examples(), ids=lambda argv: argv[4])
def test_each_example_binds_to_the_tasks_signature(argv: list[str]) -> None:
    options = dict(zip(argv[5::2], argv[6::2], strict=True))
    args = json.loads(options.get("--args", "[]"))
    kwargs = json.loads(options.get("--kwargs", "{}"))
    task = app.tasks[argv[4]]
    task_signature(task.run).bind(*args, **kwargs)  # TypeError when the docs are wrong
