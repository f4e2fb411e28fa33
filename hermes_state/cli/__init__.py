# PYTHON_ARGCOMPLETE_OK  (argcomplete looks for this marker in the console script's module)
"""The ``hermes-state`` command line: parsing, option/environment twins, output and exit codes.

Every command is a function next to the declaration of its parser (``configure_*`` then
``run_*`` in each module). A command returns one :class:`Result`: a JSON-able document that
``--json`` prints as is and text mode renders (tables with a header row).

Exit codes: 0 done, 1 refused or failed (a request while one is in flight, an unreachable
database, drift found, a database not at head for a command that only reads, a destructive
downgrade not confirmed), 2 bad input (arguments, URLs, ids, files that are not databases,
another application's database, a damaged file), 3 a ``--wait`` that timed out, 130
interrupted (Ctrl-C), 141 the reader of the output went away (``| head``: 128 + SIGPIPE, what a
shell reports for ``seq``). User errors never print a traceback; ``HERMES_STATE_DEBUG=1`` shows one.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

from ..errors import (
    DatabaseCorruptError,
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    NotADatabaseError,
)
from .common import (
    DEBUG_ENV,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_REFUSED,
    EXIT_TIMED_OUT,
    Handler,
    Output,
    Result,
    Table,
    add_option,
    check_environment,
    command,
    database_url,
    finite_number,
    global_options,
    how_to_fix,
    open_store,
    repeated,
    whole_number,
    yes_no,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_REFUSED",
    "EXIT_TIMED_OUT",
    "Output",
    "Result",
    "Table",
    "add_option",
    "build_parser",
    "command",
    "database_url",
    "finite_number",
    "main",
    "open_store",
    "repeated",
    "whole_number",
]


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("hermes-state")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


class _PrintVersion(argparse._VersionAction):
    """argparse's ``--version``, looked up only when asked for: reading the installed
    metadata would cost every command's start-up ~15 ms."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        self.version = f"hermes-state {_version()}"
        super().__call__(parser, *args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from . import dashboard, db, demo, handoff, session, watch

    parser = argparse.ArgumentParser(
        prog="hermes-state",
        description="Administer hermes-state databases and run the handoff watcher.",
        epilog="Exit codes: 0 done, 1 refused or failed, 2 bad input, 3 a --wait timed out, "
        "130 interrupted, 141 output pipe closed early. Global options work before or after "
        "the command.",
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the version")
    global_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (db, session, handoff, watch, demo, dashboard):
        module.register(commands)
    return parser


_build_parser = build_parser  # the tests' historical name


def _autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a shell's completion request (argcomplete, the ``completion`` extra)."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    stdout, stderr = sys.stdout, sys.stderr
    try:
        code = _main(argv, stdout, stderr)
        # Written out now, while a closed pipe can still be told apart from a bug.
        stdout.flush()
    except BrokenPipeError:
        return _reader_gone(stdout, stderr)
    return code


def _main(argv: Sequence[str] | None, stdout: TextIO, stderr: TextIO) -> int:
    try:
        parser = build_parser()
        _autocomplete(parser)
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse: --help (0) or a usage error (2)
        return int(exit_request.code or 0) if isinstance(exit_request.code, int | None) else 2
    out = Output(args.json is True, stdout, stderr)
    try:
        check_environment(args)
        _check_names(args)
    except (InvalidInputError, InvalidInputTypeError) as exc:
        return _failed(out, str(exc), EXIT_BAD_INPUT)
    if args.url:
        out.typed_urls.append(args.url)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=stderr,
    )
    if not args.verbose:  # our own progress at INFO; libraries' chatter only with --verbose
        for name in ("hermes_state", "gateway"):
            logging.getLogger(name).setLevel(logging.INFO)
    return _run(args, out)


def _check_names(args: argparse.Namespace) -> None:
    """A session id or platform the store would refuse is bad input before anything opens a
    database (a missing database is then not what the user hears about)."""
    from ..validation import NAME_LENGTH, require_identifier

    if isinstance(getattr(args, "session_id", None), str):
        require_identifier("session_id", args.session_id)
    if isinstance(getattr(args, "platform", None), str):
        require_identifier("platform", args.platform, max_length=NAME_LENGTH)


def _run(args: argparse.Namespace, out: Output) -> int:
    command_function: Handler = args.command_function
    try:
        result = command_function(args, out)
    except (
        InvalidInputError,
        InvalidInputTypeError,
        NotADatabaseError,
        ForeignDatabaseError,
        DatabaseCorruptError,
    ) as exc:
        return _failed(out, _with_fix(exc, args), EXIT_BAD_INPUT)
    except HermesStateError as exc:
        return _failed(out, _with_fix(exc, args), EXIT_REFUSED)
    except KeyboardInterrupt:
        return _failed(out, "interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        raise
    except Exception as exc:
        if _debug():
            traceback.print_exc(file=out.stderr)
            return EXIT_REFUSED
        return _failed(
            out,
            f"unexpected {type(exc).__name__}: {exc} "
            f"(a bug: please report it; {DEBUG_ENV}=1 shows the traceback)",
            EXIT_REFUSED,
        )
    out.emit(result)
    return result.code


def _reader_gone(stdout: TextIO, stderr: TextIO) -> int:
    """Whoever read our output stopped (``| head -1``): end quietly, as ``seq`` does.

    The streams are pointed at /dev/null so that the interpreter's last flush finds nowhere
    to fail; the exit status is the one a shell reports for a tool that SIGPIPE ended.
    """
    for stream in (stdout, stderr):
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass  # not a file (a test's StringIO): nothing will flush it at exit
    return EXIT_PIPE_CLOSED


def _with_fix(exc: HermesStateError, args: argparse.Namespace) -> str:
    fix = how_to_fix(exc, args)
    return str(exc) if fix is None else f"{exc}; {fix}"


def _failed(out: Output, message: str, code: int) -> int:
    """A command that could not build its result: the error is its document."""
    out.emit(Result({"error": out.one_line(message), "exit_code": code}, code=code, error=message))
    return code


def _debug() -> bool:
    try:
        return yes_no(DEBUG_ENV, os.environ.get(DEBUG_ENV))
    except InvalidInputError:
        return False
