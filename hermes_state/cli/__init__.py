"""The ``hermes-state`` command line: parsing, option/environment twins, output and exit codes.

Exit codes: 0 done, 1 refused or failed (a request while one is in flight, an unreachable
database, drift found, a database not at head for a command that only reads, a destructive
downgrade not confirmed), 2 bad input (arguments, URLs, ids, files that are not databases,
another application's database, a damaged file).
User errors never print a traceback; set ``HERMES_STATE_DEBUG=1`` to see one anyway.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from sqlalchemy.engine import URL

from ..engine import is_sqlite, resolve_url
from ..errors import (
    DatabaseCorruptError,
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    InvalidInputTypeError,
    NotADatabaseError,
)

if TYPE_CHECKING:
    from ..store import SessionDB

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_OK",
    "EXIT_REFUSED",
    "Output",
    "add_json_option",
    "add_option",
    "database_url",
    "finite_number",
    "main",
    "open_store",
    "positive_int",
    "whole_number",
]

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_BAD_INPUT: Final = 2
DEBUG_ENV: Final = "HERMES_STATE_DEBUG"
#: Who the audit trail names for changes made from the command line.
CLI_ACTOR: Final = "cli"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})

Handler = Callable[[argparse.Namespace, "Output"], int]


class Output:
    """Where a command writes: plain lines for people, one JSON document with ``--json``."""

    def __init__(self, as_json: bool, stdout: TextIO, stderr: TextIO) -> None:
        self.as_json = as_json
        self.stdout = stdout
        self.stderr = stderr

    def line(self, text: str = "") -> None:
        if not self.as_json:
            print(text, file=self.stdout)

    def json(self, document: object) -> None:
        if self.as_json:
            print(json.dumps(document, indent=2, sort_keys=True, default=str), file=self.stdout)

    def error(self, text: str) -> None:
        print(f"hermes-state: {text}", file=self.stderr)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "--json", env="HERMES_STATE_JSON", flag=True, help="print JSON for scripts")


def database_url(args: argparse.Namespace, *, must_exist: bool = False) -> URL:
    """The database a command works on; ``must_exist`` refuses to create an SQLite file."""
    url = resolve_url(args.url)
    if must_exist and is_sqlite(url) and url.database and not Path(url.database).exists():
        raise HermesStateError(
            f"there is no database at {url.database}; `hermes-state db upgrade` creates one"
        )
    return url


def open_store(
    args: argparse.Namespace, *, must_exist: bool = False, read_only: bool = False
) -> SessionDB:
    """The store a command works on (an embedded file is created and migrated on demand).

    ``read_only`` for commands that only read: nothing is created, migrated or written, and a
    database that is not at head is refused with the command that brings it there.
    """
    from ..store import SessionDB

    url = database_url(args, must_exist=must_exist or read_only)
    return SessionDB(url=url, actor=CLI_ACTOR, read_only=read_only)


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum}, not {text!r}")
        return value

    return parse


def finite_number(unit: str, *, allow_zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of ``unit`` that is > 0 (or >= 0 with allow_zero)."""
    bound = ">= 0" if allow_zero else "> 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a number of {unit} {bound}, not {text!r}")
        return value

    return parse


positive_int = whole_number(1)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def add_option(
    parser: argparse.ArgumentParser,
    *flags: str,
    env: str,
    help: str,
    kind: Callable[[str], Any] = str,
    default: Any = None,
    flag: bool = False,
    repeatable: bool = False,
    metavar: str | None = None,
) -> None:
    """An option whose default comes from ``env``; ``--help`` shows the variable.

    Repeatable options read a comma-separated list from the environment. A malformed
    environment value is reported as bad input when the command runs, like a bad flag.
    """
    raw = os.environ.get(env)
    help_text = f"{help} [env: {env}]"
    if flag:
        parser.add_argument(*flags, action="store_true", default=env_flag(env), help=help_text)
        return
    if repeatable:
        # Converted when the command runs (``repeated``), so a malformed variable only
        # affects the command that reads it, as bad input.
        from_env = [item.strip() for item in (raw or "").split(",") if item.strip()]
        parser.add_argument(
            *flags, action="append", type=kind, default=None, help=help_text, metavar=metavar
        )
        name = _dest(flags)
        parser.set_defaults(**{f"_{name}_env": (env, from_env, kind)})
        return
    value = default
    if raw is not None and raw.strip():
        value = raw.strip()
    parser.add_argument(*flags, type=kind, default=value, help=help_text, metavar=metavar)


def _dest(flags: Sequence[str]) -> str:
    longest = max(flags, key=len)
    return longest.lstrip("-").replace("-", "_")


def repeated(args: argparse.Namespace, name: str) -> list[Any]:
    """A repeatable option's values: the flags when given, else the environment's list."""
    given = getattr(args, name, None)
    if given is not None:
        return list(given)
    env, raw_items, kind = getattr(args, f"_{name}_env", (None, [], str))
    try:
        return [kind(item) for item in raw_items]
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise InvalidInputError(f"{env}: {exc}") from None


def _build_parser() -> argparse.ArgumentParser:
    from . import dashboard, db, demo, handoff, session, watch

    parser = argparse.ArgumentParser(
        prog="hermes-state",
        description="Administer hermes-state databases and run the handoff watcher.",
        epilog="Exit codes: 0 done, 1 refused or failed, 2 bad input.",
    )
    add_option(
        parser,
        "--url",
        env="HERMES_STATE_URL",
        help="database URL or SQLite path (default: $HERMES_HOME/state.db, "
        "HERMES_HOME defaulting to ~/.hermes)",
        metavar="URL",
    )
    add_option(
        parser, "-v", "--verbose", env="HERMES_STATE_VERBOSE", flag=True, help="log debug detail"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (db, session, handoff, watch, demo, dashboard):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    stdout, stderr = sys.stdout, sys.stderr
    try:
        parser = _build_parser()
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse: --help (0) or a usage error (2)
        return int(exit_request.code or 0) if isinstance(exit_request.code, int | None) else 2
    except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:  # a malformed variable
        print(f"hermes-state: {exc}", file=stderr)
        return EXIT_BAD_INPUT
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=stderr,
    )
    if not args.verbose:  # our own progress at INFO; libraries' chatter only with --verbose
        for name in ("hermes_state", "gateway"):
            logging.getLogger(name).setLevel(logging.INFO)
    out = Output(bool(getattr(args, "json", False)), stdout, stderr)
    command_function: Handler = args.command_function
    try:
        return command_function(args, out)
    except (
        InvalidInputError,
        InvalidInputTypeError,
        NotADatabaseError,
        ForeignDatabaseError,
        DatabaseCorruptError,
    ) as exc:
        out.error(str(exc))
        return EXIT_BAD_INPUT
    except HermesStateError as exc:
        out.error(str(exc))
        return EXIT_REFUSED
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130
    except Exception as exc:
        if env_flag(DEBUG_ENV):
            traceback.print_exc(file=stderr)
        else:
            out.error(
                f"unexpected {type(exc).__name__}: {exc} "
                f"(a bug: please report it; {DEBUG_ENV}=1 shows the traceback)"
            )
        return EXIT_REFUSED
