"""One error base for everything a user can cause, with the exit code each command uses.

Library functions raise a :class:`CrashscopeError` subclass; the CLI turns it into one
line on standard error (``crashscope: <message>``) and its ``exit_code``, never a
traceback. The Slurm epilog and other callers can do the same through :data:`EXIT_CODES`.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CRASH_FOUND = 1
EXIT_USAGE = 2
EXIT_NOTHING_READABLE = 3
EXIT_INTERNAL = 4
EXIT_TICKET_AUTH = 5
EXIT_TICKET_NOT_FOUND = 6
EXIT_TICKET_REJECTED = 7

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "analysis ran (whatever the verdict); for other commands, success",
    EXIT_CRASH_FOUND: "a cause other than `none` was found (only with `analyze --fail-on-crash`); `rules check` found errors",
    EXIT_USAGE: "usage error: bad option or value, missing directory, output that cannot be written",
    EXIT_NOTHING_READABLE: "nothing readable in the directory",
    EXIT_INTERNAL: "internal error (a bug: please report it with the command line)",
    EXIT_TICKET_AUTH: "ticket: the service refused the credentials (HTTP 401/403)",
    EXIT_TICKET_NOT_FOUND: "ticket: no such repository, project or URL (HTTP 404)",
    EXIT_TICKET_REJECTED: "ticket: the service rejected the request (another HTTP 4xx)",
}


class CrashscopeError(Exception):
    """Base of every error a user can cause. ``str(e)`` is a one-line message."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CrashscopeError):
    """A bad option or option value."""


class OutputError(CrashscopeError):
    """The output file cannot be written where asked (missing or unwritable directory,
    inside the analysed directory, a directory in the way)."""


class InputError(CrashscopeError):
    """The input directory or file is missing."""


class NothingReadable(CrashscopeError):
    exit_code = EXIT_NOTHING_READABLE


class TicketAuthError(CrashscopeError):
    exit_code = EXIT_TICKET_AUTH


class TicketNotFound(CrashscopeError):
    exit_code = EXIT_TICKET_NOT_FOUND


class TicketRejected(CrashscopeError):
    exit_code = EXIT_TICKET_REJECTED


def exit_codes_help() -> str:
    return "Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items()) + "."
