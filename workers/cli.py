"""The ``trainscaler`` command: the root that gathers the sub-commands.

Each sub-command lives in ``workers.commands.<name>``; this module only
composes them and turns errors into one clear line (``--debug`` for the
traceback).
"""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="trainscaler",
    help="Autoscaler for elastic training jobs on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


# Run often (the liveness probe): registered alone, without importing every other command.
LIGHT_COMMANDS = frozenset({"healthcheck"})


def _group_callback() -> None:
    """Autoscaler for elastic training jobs on Kubernetes."""


def _register(command: str | None) -> None:
    # Sub-commands register themselves on import; import errors of optional
    # parts (for example the simulator's plotting) surface when they are used.
    from workers.commands import register_all

    if command in LIGHT_COMMANDS:
        # A callback keeps the one registered command a sub-command (Typer would
        # otherwise make a lone command the root).
        app.callback()(_group_callback)
        register_all(app, only=command)
    else:
        register_all(app)


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--debug"]
    _register(args[0] if args else None)
    try:
        app(args=args, standalone_mode=True)
    except SystemExit:
        raise
    except Exception as error:  # the CLI's contract: one line, non-zero exit
        if debug:
            raise
        typer.echo(f"error: {error}", err=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
