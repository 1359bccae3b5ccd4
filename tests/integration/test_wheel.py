"""The built wheel puts no generic top-level package into site-packages (issue 16).

The wheel is built as pip builds it (``pip wheel --no-deps``, isolated build)
from a copy of the checkout that still holds ``bench/`` and ``tests/``:

* the full wheel's top-level names are exactly ``scheduler_core``, ``workers``
  and the namespaced simulator ``trainscaler_sim`` (``trainscaler run`` and
  ``simulate`` need it); no ``sim``, no ``bench``, no ``tests``;
* the image's build context (what .dockerignore admits: no simulator) gives a
  wheel of ``scheduler_core`` and ``workers`` only, whose CLI still loads.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import REPO

pytestmark = pytest.mark.timeout(600)

RUNTIME = ("scheduler_core", "workers")


def build_wheel(source: Path, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), "."],
        cwd=source, capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("trainscaler-*.whl")
    return wheel


def top_level_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist()}
        (top_level,) = [n for n in archive.namelist() if n.endswith(".dist-info/top_level.txt")]
        declared = set(archive.read(top_level).decode().split())
    found = {name for name in names if not name.endswith(".dist-info")}
    assert declared == found, (declared, found)
    return found


def checkout_copy(tmp_path: Path, *, packages: tuple[str, ...]) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in packages:
        shutil.copytree(REPO / package, source / package, ignore=ignore)
    return source


def test_the_wheel_has_only_namespaced_top_level_packages(tmp_path: Path) -> None:
    source = checkout_copy(tmp_path, packages=(*RUNTIME, "trainscaler_sim", "bench", "tests"))
    wheel = build_wheel(source, tmp_path / "wheels")
    names = top_level_names(wheel)
    assert names == {"scheduler_core", "workers", "trainscaler_sim"}
    assert not names & {"sim", "bench", "tests"}
    with zipfile.ZipFile(wheel) as archive:
        listed = set(archive.namelist())
    assert "workers/commands/healthcheck.py" in listed
    assert "trainscaler_sim/embedded/driver.py" in listed
    assert "workers/py.typed" in listed and "scheduler_core/py.typed" in listed


def test_the_images_wheel_is_the_runtime_alone_and_its_cli_loads(tmp_path: Path) -> None:
    source = checkout_copy(tmp_path, packages=RUNTIME)
    wheel = build_wheel(source, tmp_path / "wheels")
    assert top_level_names(wheel) == set(RUNTIME)
    # Installed alone (dependencies from this venv): the CLI lists every command, and
    # the ones that need the simulator say so instead of crashing the CLI.
    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import importlib.abc\n"
        "class NoSimulator(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'trainscaler_sim': raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, NoSimulator())\n"
        "from workers.cli import main\n"
        "import workers; assert workers.__file__.startswith(sys.argv[1]), workers.__file__\n"
        "main(sys.argv[2:])"
    )
    listing = subprocess.run(
        [sys.executable, "-c", probe, str(target), "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listing.returncode == 0, listing.stderr
    for command in ("healthcheck", "api", "run", "simulate"):
        assert command in listing.stdout, command
    refused = subprocess.run(
        [sys.executable, "-c", probe, str(target), "run"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "needs the simulator" in refused.stderr, refused.stderr
