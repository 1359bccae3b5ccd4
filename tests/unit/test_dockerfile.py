"""deploy/Dockerfile's rules, checked statically (no Docker daemon needed).

* Every stage starts from an image pinned by digest.
* Dependencies are installed only from lock files with a sha256 hash for every
  requirement (pip ``--require-hashes``), and the runtime lock pins every
  runtime dependency of pyproject.toml, within its specifier, and no extra.
* The image ships the runtime only: nothing copies the simulator, the
  benchmarks or the tests, and the build context (.dockerignore) excludes them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
RUNTIME_LOCK = REPO / "deploy" / "requirements.lock"
BUILD_LOCK = REPO / "deploy" / "build-requirements.lock"
NOT_SHIPPED = ("sim", "bench", "tests", "trainscaler_sim", "docs", "scripts")
DIGEST = re.compile(r"^[\w.\-/:]+@sha256:[0-9a-f]{64}$")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n", " ", path.read_text())
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        assert not line.startswith("-"), f"{path.name}: option line {line!r}"
        requirement, *options = line.split()
        name, _, version = requirement.partition("==")
        assert version, f"{path.name}: {requirement} is not pinned with =="
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:")]
        assert len(hashes) == len(options), f"{path.name}: {line}"
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def test_every_stage_starts_from_an_image_pinned_by_digest() -> None:
    froms = [args for keyword, args in instructions(DOCKERFILE.read_text()) if keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    for args in froms:
        image = args.split()[0]
        assert DIGEST.match(image), f"not pinned by digest: {image}"
    assert "ARG" not in {keyword for keyword, _ in instructions(DOCKERFILE.read_text())}


def test_the_runtime_stage_copies_only_the_built_environment() -> None:
    steps = instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    copies = [args for keyword, args in steps[last_from:] if keyword in {"COPY", "ADD"}]
    assert copies and all(args.startswith("--from=build ") for args in copies), copies


def test_nothing_copies_the_simulator_benchmarks_or_tests() -> None:
    for keyword, args in instructions(DOCKERFILE.read_text()):
        if keyword in {"COPY", "ADD"}:
            sources = [a for a in args.split()[:-1] if not a.startswith("--")]
            assert "." not in sources and "./" not in sources, f"{keyword} {args}: the whole tree"
            for source in sources:
                top = source.removeprefix("./").split("/")[0]
                assert top not in NOT_SHIPPED, f"{keyword} {args}"


def test_the_build_context_excludes_everything_but_the_runtime() -> None:
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*", "deny by default"
    allowed = {rule.removeprefix("!").rstrip("/") for rule in rules if rule.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "scheduler_core",
        "workers",
        "deploy/requirements.lock",
        "deploy/build-requirements.lock",
    }


def test_every_pip_install_requires_hashes_or_installs_the_local_wheel() -> None:
    for keyword, args in instructions(DOCKERFILE.read_text()):
        if keyword != "RUN":
            continue
        for command in args.split("&&"):
            words = command.split()
            if "pip" not in " ".join(words[:2]) or "install" not in words:
                continue
            if "--require-hashes" in words:
                assert "-r" in words
                lock = words[words.index("-r") + 1]
                assert lock in {"deploy/requirements.lock", "deploy/build-requirements.lock"}
            else:  # only the project's own wheel, offline and without dependencies
                assert {"--no-deps", "--no-index"} <= set(words), command
                assert words[-1].startswith("/wheels/trainscaler-"), command


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_every_locked_requirement_has_sha256_hashes(lock: Path) -> None:
    entries = locked(lock)
    assert entries
    for name, (_, hashes) in entries.items():
        assert hashes, f"{name} has no hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_the_runtime_lock_pins_every_runtime_dependency_and_no_extra() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    entries = locked(RUNTIME_LOCK)
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} missing from the lock"
        assert requirement.specifier.contains(entries[name][0]), (name, entries[name][0])
    extras_only = {
        canonicalize_name(Requirement(spec).name)
        for specs in project["optional-dependencies"].values()
        for spec in specs
    } - {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    shipped = extras_only & set(entries)
    # An extra may still be a transitive runtime dependency (none is today).
    assert not shipped, f"dev/sim/embedded packages in the runtime lock: {shipped}"


def test_the_build_lock_holds_the_build_backend() -> None:
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    entries = locked(BUILD_LOCK)
    for spec in build["requires"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in entries and requirement.specifier.contains(entries[name][0]), name
