"""Sub-commands of the ``trainscaler`` CLI, one module each.

``register_all`` adds every sub-command module that exists to the root app.
A command module that needs the simulator (``run``, ``simulate``) is replaced
by a stub that says so when the simulator is not installed: the container
image ships the runtime only (deploy/Dockerfile).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import typer

SIMULATOR_PACKAGES = frozenset({"trainscaler_sim"})


def _simulator_missing(error: ModuleNotFoundError) -> bool:
    return (error.name or "").split(".")[0] in SIMULATOR_PACKAGES


def _stub(name: str) -> Callable[[], None]:
    def missing() -> None:
        typer.echo(
            f"error: '{name}' needs the simulator, which this installation does not include "
            "(the container image ships the runtime only; install trainscaler from a source "
            "checkout for the embedded system)",
            err=True,
        )
        raise typer.Exit(1)

    missing.__doc__ = f"Unavailable here: '{name}' needs the simulator (not installed)."
    return missing


def register_all(app: typer.Typer, *, only: str | None = None) -> None:
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if only is not None and module_info.name != only:
            continue
        try:
            module = importlib.import_module(f"{__name__}.{module_info.name}")
        except ModuleNotFoundError as error:
            if not _simulator_missing(error):
                raise
            app.command(name=module_info.name.replace("_", "-"))(_stub(module_info.name))
            continue
        register = getattr(module, "register", None)
        if callable(register):
            register(app)
