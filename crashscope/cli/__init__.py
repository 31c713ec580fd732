"""The ``crashscope`` command line. Each command group lives in its own module and
registers itself here; heavy imports (polars, sklearn) happen inside the commands so
``crashscope --help`` and the Slurm epilog start fast. torch is imported only by repro.

Errors: every user-caused error is a :class:`crashscope.errors.CrashscopeError` (or a click
usage error) and comes out as ONE line on standard error with its exit code, never a
traceback (``CRASHSCOPE_DEBUG=1`` shows one for internal errors).

Exit codes (:data:`crashscope.errors.EXIT_CODES`):
  0  analysis ran (whatever the verdict); for other commands, success
  1  a cause other than `none` was found (only with `analyze --fail-on-crash`); `rules check` found errors
  2  usage error: bad option or value, missing directory, output that cannot be written
  3  nothing readable in the directory
  4  internal error (a bug)
"""

from __future__ import annotations

import os
import sys
from importlib import import_module
from typing import Any

import typer
from typer import _click  # the click typer uses (vendored in recent typer)
from typer.core import TyperGroup

from crashscope import __version__
from crashscope.errors import EXIT_CODES, EXIT_INTERNAL, EXIT_USAGE, CrashscopeError


def _exit_help() -> str:
    return "\b\nExit codes:\n" + "\n".join(f"  {k}  {v}" for k, v in EXIT_CODES.items())


EXIT_HELP = _exit_help()
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _say(message: str) -> None:
    print(f"crashscope: {message}", file=sys.stderr, flush=True)


def _one_line(text: str) -> str:
    from crashscope.report.safe import escape_controls

    return escape_controls(" ".join(str(text).split()), 1000)


class CrashscopeGroup(TyperGroup):
    """Runs every command with one error policy: one line and an exit code."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,  # type: ignore[override]
             standalone_mode: bool = True, **extra: Any) -> Any:
        code: Any = 0
        from crashscope.cli._coerce import install

        install(self)  # plain options coerced without importing pydantic (0.13 s of a small analyze)
        try:
            code = super().main(args=args, prog_name=prog_name or "crashscope", complete_var=complete_var, standalone_mode=False, **extra)
        except _click.exceptions.UsageError as e:
            cmd = e.ctx.command_path if e.ctx is not None else "crashscope"
            _say(f"{_one_line(e.format_message())} (see '{cmd} -h')")
            code = EXIT_USAGE
        except _click.exceptions.ClickException as e:
            _say(_one_line(e.format_message()))
            code = e.exit_code
        except (typer.Abort, KeyboardInterrupt):
            _say("aborted")
            code = 130
        except CrashscopeError as e:
            _say(_one_line(str(e)))
            code = e.exit_code
        except typer.Exit as e:
            code = e.exit_code
        except BrokenPipeError:
            code = 1
        except Exception as e:  # a bug: say so in one line, the traceback on request
            if os.environ.get("CRASHSCOPE_DEBUG"):
                raise
            _say(f"internal error: {type(e).__name__}: {_one_line(str(e))} (CRASHSCOPE_DEBUG=1 shows the traceback)")
            code = EXIT_INTERNAL
        if not isinstance(code, int):
            code = 0
        if standalone_mode:
            sys.exit(code)
        return code


def _version(value: bool) -> None:
    if value:
        typer.echo(f"crashscope {__version__}")
        raise typer.Exit(0)


def new_app(modules: tuple[str, ...] | None = None) -> typer.Typer:
    """The ``crashscope`` app with the commands of ``modules`` (default: all of
    :data:`COMMAND_MODULES`, in their order)."""
    app = typer.Typer(
        name="crashscope",
        cls=CrashscopeGroup,
        help="Find why a multi-node GPU training job died, from its log directory.",
        epilog=EXIT_HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings=CONTEXT,
    )
    app.callback()(_root)
    for name in COMMAND_MODULES if modules is None else modules:
        import_module(f"crashscope.cli.{name}").register(app)
    return app


def _root(
    version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_version, help="Print the version and exit."),
) -> None:
    """Find why a multi-node GPU training job died, from its log directory."""


# One registration style: each module's ``register(app)`` adds its commands, in this order
# (the order of ``crashscope --help``). The commands call library functions (crashscope.pipeline,
# report.build, tickets, fleet, epilog), the same ones the epilog and the tests call.
COMMAND_MODULES = (
    "analyze_cmd",  # analyze, timeline, sources
    "simulate_cmd",  # simulate
    "rules_cmd",  # rules check/list/docs
    "train_cmd",  # train
    "repro_cmd",  # repro
    "fleet_cmd",  # fleet
    "ticket_cmd",  # ticket
    "epilog_cmd",  # epilog, shard, collect
)
# The top-level command names each module registers (tests/test_startup.py checks them
# against the modules): ``main()`` builds only the invoked command's module, as typer builds
# every registered command's click object from its signature on each run (0.02 s for all).
COMMANDS = {
    "analyze": "analyze_cmd", "timeline": "analyze_cmd", "sources": "analyze_cmd", "simulate": "simulate_cmd",
    "rules": "rules_cmd", "train": "train_cmd", "repro": "repro_cmd", "fleet": "fleet_cmd", "ticket": "ticket_cmd",
    "epilog": "epilog_cmd", "shard": "epilog_cmd", "collect": "epilog_cmd",
}


def __getattr__(name: str) -> Any:
    """``app``: every command, built on first use (tests, ``typer.testing``, docs)."""
    if name == "app":
        app = globals()["app"] = new_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The console script. ``crashscope COMMAND ...`` builds that command's module only;
    anything else (``--help``, ``--version``, no or an unknown command) the whole app."""
    module = COMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    (new_app((module,)) if module is not None else __getattr__("app"))()
