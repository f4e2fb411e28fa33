"""What every ``hermes-state`` command shares: results and their rendering, options with
environment twins, bounded numbers, URLs and stores, exit codes."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shlex
import signal
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from sqlalchemy.engine import URL

from ..engine import ENV_URL, describe, is_sqlite, resolve_url
from ..errors import (
    ForeignDatabaseError,
    HermesStateError,
    InvalidInputError,
    NotADatabaseError,
    SchemaOutOfDateError,
)
from ..models import HandoffState

if TYPE_CHECKING:
    from ..store import SessionDB

__all__ = [
    "DEBUG_ENV",
    "EXIT_BAD_INPUT",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "EXIT_REFUSED",
    "EXIT_TIMED_OUT",
    "MAX_ROWS",
    "MAX_SECONDS",
    "STATE_NAMES",
    "Handler",
    "Output",
    "Result",
    "Table",
    "add_option",
    "check_environment",
    "command",
    "database_url",
    "finite_number",
    "global_options",
    "group",
    "how_to_fix",
    "local_time",
    "open_store",
    "refuse_damaged",
    "repeated",
    "state_name",
    "unknown_session",
    "upgrade_as_typed",
    "whole_number",
    "yes_no",
]

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_TIMED_OUT: Final = 3
EXIT_INTERRUPTED: Final = 130
#: The reader of stdout went away (``| head``): 128 + SIGPIPE, as a shell reports ``seq``'s end.
EXIT_PIPE_CLOSED: Final = 128 + signal.SIGPIPE
DEBUG_ENV: Final = "HERMES_STATE_DEBUG"
#: Who the audit trail names for changes made from the command line.
CLI_ACTOR: Final = "cli"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})
#: The largest row count any option accepts (a limit beyond it is certainly a typo).
MAX_ROWS: Final = 1_000_000
#: The longest duration any option accepts, in seconds (one week).
MAX_SECONDS: Final = 7 * 86400.0
STATE_NAMES: Final = ", ".join(state.value for state in HandoffState)


@dataclass
class Table:
    """Rows under a header row; ``None`` cells print as ``-``."""

    header: Sequence[str]
    rows: Sequence[Sequence[Any]]

    def lines(self) -> list[str]:
        cells = [[str(h) for h in self.header]]
        cells += [["-" if cell is None else _flat(str(cell)) for cell in row] for row in self.rows]
        widths = [max(_width(row[i]) for row in cells) for i in range(len(self.header))]
        return [
            "  ".join(
                cell + " " * (width - _width(cell)) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
            for row in cells
        ]


#: Characters that would reorder or hide what a terminal shows: bidirectional controls.
_BIDI_CONTROLS: Final = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e") | frozenset(
    "\u2066\u2067\u2068\u2069"
)


def _flat(text: str) -> str:
    """A table cell on one line and as it is: line breaks shown as ``\\n``, other control
    characters and bidirectional controls (an id holding U+202E would reverse the line) as
    their escapes."""
    text = text.replace("\r\n", "\n").replace("\n", "\\n")
    return "".join(
        f"\\u{ord(char):04x}"
        if char in _BIDI_CONTROLS or unicodedata.category(char) == "Cc"
        else char
        for char in text
    )


def _width(text: str) -> int:
    """Terminal columns ``text`` takes: wide (CJK, most emoji) characters two, combining
    marks none."""
    return sum(
        0
        if unicodedata.combining(char)
        else 2
        if unicodedata.east_asian_width(char) in ("W", "F")
        else 1
        for char in text
    )


@dataclass
class Result:
    """What a command produced: ``document`` for ``--json``, ``text`` (lines and tables) for
    people, the exit code, and for a refusal one line for stderr."""

    document: Any
    text: list[str | Table] = field(default_factory=list)
    code: int = EXIT_OK
    error: str | None = None


class Output:
    """Where a command writes while it runs: live progress on a terminal only (stderr)."""

    def __init__(self, as_json: bool, stdout: TextIO, stderr: TextIO) -> None:
        self.as_json = as_json
        self.stdout = stdout
        self.stderr = stderr
        self._progress_shown = False
        #: The database URLs as the user typed them (--url, db copy's --to), for errors to quote.
        self.typed_urls: list[str] = []

    @property
    def live(self) -> bool:
        """True when a person watches stderr (a terminal) and JSON was not asked for."""
        return not self.as_json and self.stderr.isatty()

    def progress(self, text: str) -> None:
        """Rewrite the status line (terminals only; quiet otherwise)."""
        if self.live:
            print(f"\r\x1b[K{text}", end="", file=self.stderr, flush=True)
            self._progress_shown = True

    def end_progress(self) -> None:
        if self._progress_shown:
            print(file=self.stderr, flush=True)
            self._progress_shown = False

    def narrate(self, text: str = "") -> None:
        """A line of a long command's story, as it happens (text mode only)."""
        if not self.as_json:
            print(text, file=self.stdout, flush=True)

    def error(self, text: str) -> None:
        self.end_progress()
        print(f"hermes-state: {self.one_line(text)}", file=self.stderr)

    def one_line(self, text: str) -> str:
        """Driver messages span lines; an error is one line, naming URLs as they were typed."""
        flat = re.sub(r"\s+", " ", text).replace("?.", "?").strip()
        for typed_url in self.typed_urls:
            if "://" not in typed_url:
                continue
            try:
                shown = describe(resolve_url(typed_url))
            except HermesStateError:
                continue
            typed = _mask_password(typed_url)
            backend, _, rest = shown.partition("://")
            spellings = [
                f"{backend.split('+')[0]}+{driver}://{rest}"
                for driver in ("psycopg", "asyncpg", "pymysql", "aiomysql", "pysqlite", "aiosqlite")
            ]
            # Where the text already names the URL as typed (a command to run, say), that
            # stays: an SQLite path is a part of its own URL.
            pieces = flat.split(typed)
            for index, piece in enumerate(pieces):
                for spelling in [*spellings, shown]:
                    piece = piece.replace(spelling, typed)
                pieces[index] = piece
            flat = typed.join(pieces)
        return flat

    def emit(self, result: Result) -> None:
        self.end_progress()
        if self.as_json:
            # Non-ASCII as itself where the output can carry it (\u escapes elsewhere).
            readable = "utf" in (getattr(self.stdout, "encoding", None) or "").lower()
            print(
                json.dumps(
                    result.document,
                    indent=2,
                    sort_keys=True,
                    default=str,
                    ensure_ascii=not readable,
                ),
                file=self.stdout,
            )
        else:
            for item in result.text:
                for line in item.lines() if isinstance(item, Table) else [item]:
                    print(line, file=self.stdout)
        if result.error:
            self.error(result.error)


def local_time(epoch: object) -> object:
    """Epoch seconds as local time for people; anything else as it is."""
    if isinstance(epoch, int | float) and not isinstance(epoch, bool):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))
    return epoch


def unknown_session(session_id: str) -> Result:
    """The refusal of a command about a session that does not exist."""
    return Result(
        {"id": session_id, "error": "unknown session"},
        code=EXIT_REFUSED,
        error=f"no session {session_id!r}",
    )


def _mask_password(text: str) -> str:
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", text)


Handler = Callable[[argparse.Namespace, Output], Result]


# -- option types ------------------------------------------------------------------------------


def whole_number(minimum: int, maximum: int = MAX_ROWS) -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {minimum} to {maximum}, not {text!r}"
            )
        return value

    return parse


def finite_number(
    unit: str, *, allow_zero: bool, maximum: float = MAX_SECONDS
) -> Callable[[str], float]:
    """An argparse type: a number of ``unit`` above 0 (or from 0 with allow_zero) up to
    ``maximum``."""
    bound = f"{'from 0' if allow_zero else 'above 0'} up to {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ((value >= 0 if allow_zero else value > 0) and value <= maximum):
            raise argparse.ArgumentTypeError(f"expected a number of {unit} {bound}, not {text!r}")
        return value

    return parse


def state_name(text: str) -> str:
    """An argparse type: the name of a handoff state."""
    if text not in {state.value for state in HandoffState}:
        raise argparse.ArgumentTypeError(f"unknown state {text!r}; expected one of {STATE_NAMES}")
    return text


def yes_no(name: str, raw: str | None) -> bool:
    """An environment switch: 1/0, true/false, yes/no, on/off (any case); else bad input."""
    text = (raw or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidInputError(
        f"{name}={raw!r} is not a yes/no value; use 1/0, true/false, yes/no or on/off"
    )


@dataclass(frozen=True)
class _BadEnvironment:
    """The default of an option whose variable is malformed: bad input if the command runs."""

    message: str


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
    required: bool = False,
) -> None:
    """An option whose default comes from ``env``; ``--help`` shows the variable.

    Repeatable options read a comma-separated list from the environment. A malformed
    environment value is reported as bad input when a command that reads it runs. A
    ``required`` option is required (and shown so in the usage) unless ``env`` gives it.
    """
    raw = os.environ.get(env)
    help_text = f"{help} [env: {env}]"
    if flag:
        try:
            value: Any = yes_no(env, raw)
        except InvalidInputError as exc:
            value = _BadEnvironment(str(exc))
        parser.add_argument(*flags, action="store_true", default=value, help=help_text)
        return
    if repeatable:
        from_env = [item.strip() for item in (raw or "").split(",") if item.strip()]
        parser.add_argument(
            *flags, action="append", type=kind, default=None, help=help_text, metavar=metavar
        )
        name = _dest(flags)
        parser.set_defaults(**{f"_{name}_env": (env, from_env, kind)})
        return
    value = default
    if raw is not None and raw.strip():
        try:
            value = kind(raw.strip())
        except (ValueError, argparse.ArgumentTypeError) as exc:
            value = _BadEnvironment(f"argument {max(flags, key=len)}: {exc} (from {env})")
    parser.add_argument(
        *flags,
        type=kind,
        default=value,
        help=help_text,
        metavar=metavar,
        required=required and value is None,
    )


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


def check_environment(args: argparse.Namespace) -> None:
    for value in vars(args).values():
        if isinstance(value, _BadEnvironment):
            raise InvalidInputError(value.message)


# -- the database ------------------------------------------------------------------------------


def database_url(args: argparse.Namespace, *, must_exist: bool = False) -> URL:
    """The database a command works on; ``must_exist`` refuses to create an SQLite file."""
    url = resolve_url(_typed_url(args))
    if must_exist and is_sqlite(url) and url.database and not Path(url.database).exists():
        _refuse_a_file_as_folder(Path(url.database))
        raise HermesStateError(
            f"there is no database at {url.database}; `{upgrade_as_typed(args)}` creates one"
        )
    return url


def _refuse_a_file_as_folder(path: Path) -> None:
    """A path below a regular file is bad input (exit 2), not a database that is missing."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidInputError(
                    f"{path} is below {parent}, which is a file; give a path whose parents "
                    "are folders"
                )
            return


def upgrade_as_typed(args: argparse.Namespace, typed: str | None = None) -> str:
    """The command that creates or migrates the database (``--url``'s, or ``typed``), naming
    it as the user did."""
    typed = typed or getattr(args, "url", None)
    if typed is None:
        return "hermes-state db upgrade"
    return f"hermes-state db upgrade --url {shlex.quote(_mask_password(typed))}"


def refuse_damaged(url: URL) -> None:
    """An SQLite file ``PRAGMA quick_check`` finds damaged is refused (exit 2) before a
    command reads or writes a row of it; what SQLite found is named."""
    from ..errors import corrupt_error
    from ..schema import damage_of

    damage = damage_of(url)
    if damage is not None:
        raise corrupt_error(describe(url), damage)


def how_to_fix(exc: HermesStateError, args: argparse.Namespace) -> str | None:
    """What the user can do about a library error, in commands, naming the database as typed
    (the library says what is wrong; the command line knows how its user fixes it)."""
    if isinstance(exc, SchemaOutOfDateError):
        return f"run `{upgrade_as_typed(args, _named_in(exc, args))}` and try again"
    if isinstance(exc, ForeignDatabaseError):
        return (
            f"point --url (or ${ENV_URL}) at a hermes state file, or adopt this one on purpose: "
            f"`{upgrade_as_typed(args)} --adopt-foreign`"
        )
    if isinstance(exc, NotADatabaseError):
        return f"point --url (or ${ENV_URL}) at a hermes state file"
    return None


def _named_in(exc: HermesStateError, args: argparse.Namespace) -> str | None:
    """``db copy``'s --to when the error is about that database (else None: --url's)."""
    to = getattr(args, "to", None)
    if isinstance(to, str) and to.strip():
        try:
            if str(exc).startswith(describe(resolve_url(to))):
                return to
        except HermesStateError:
            return None
    return None


def existing_url(args: argparse.Namespace) -> URL:
    """The database a command that writes rows works on: it must exist and be at head, since
    only ``db upgrade`` creates or migrates one (a mistyped --url must not leave a new
    database behind, nor a gateway watch an empty one)."""
    from ..schema import HEAD_REVISION, FileKind, look_at_sqlite_file, out_of_date

    url = database_url(args, must_exist=True)
    if not is_sqlite(url):
        return url  # a server database that is behind is refused when the store opens
    state = look_at_sqlite_file(url)
    if state.kind is not FileKind.NEW:
        refuse_damaged(url)
    if state.kind is FileKind.NEW:
        raise HermesStateError(
            f"{url.database} holds no database yet; `{upgrade_as_typed(args)}` creates one"
        )
    if state.kind is FileKind.HERMES and state.revision != HEAD_REVISION:
        raise out_of_date(str(url.database), state.revision)
    return url


def _typed_url(args: argparse.Namespace) -> str | None:
    typed: str | None = args.url
    if typed is not None and not typed.strip():
        raise InvalidInputError(
            "--url is empty; give a database URL or an SQLite path, or leave --url out to use "
            f"${ENV_URL} or $HERMES_HOME/state.db"
        )
    return typed


def open_store(
    args: argparse.Namespace,
    *,
    must_exist: bool = False,
    read_only: bool = False,
    actor: str = CLI_ACTOR,
) -> SessionDB:
    """The store a command works on: one that exists and is at head (see
    :func:`existing_url`); ``db upgrade`` is the command that creates or migrates one.

    ``read_only`` for commands that only read: nothing is created, migrated or written; an
    SQLite file not at head (an upstream file not adopted yet) is read as it is, through the
    lens (:mod:`hermes_state.lens`), and a damaged one is refused.
    """
    from ..store import SessionDB

    if read_only:
        url = database_url(args, must_exist=True)
        if is_sqlite(url):
            refuse_damaged(url)
    else:
        url = existing_url(args)
    return SessionDB(url=url, actor=actor, read_only=read_only)


# -- parsers -----------------------------------------------------------------------------------

GLOBAL_OPTIONS: Final = ("url", "verbose", "json")


def global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """--url, -v and --json: on the top level with their defaults, and on every command with
    no default, so that they are accepted before or after the command's name."""
    if suppress:
        parser.add_argument(
            "--url", default=argparse.SUPPRESS, metavar="URL", help=_URL_HELP + f" [env: {ENV_URL}]"
        )
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=argparse.SUPPRESS,
            help="log debug detail [env: HERMES_STATE_VERBOSE]",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="print the result as one JSON document [env: HERMES_STATE_JSON]",
        )
        return
    add_option(parser, "--url", env=ENV_URL, help=_URL_HELP, metavar="URL")
    add_option(
        parser, "-v", "--verbose", env="HERMES_STATE_VERBOSE", flag=True, help="log debug detail"
    )
    add_option(
        parser,
        "--json",
        env="HERMES_STATE_JSON",
        flag=True,
        help="print the result as one JSON document",
    )


_URL_HELP: Final = (
    "database URL or SQLite path (default: $HERMES_HOME/state.db, HERMES_HOME defaulting to "
    "~/.hermes)"
)


@functools.cache
def _parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    global_options(parent, suppress=True)
    return parent


def group(commands: Any, name: str, *, help: str) -> Any:
    """A command with actions (``db``, ``handoff``, ``session``): its subparsers."""
    parser = commands.add_parser(name, help=help, description=help, parents=[_parent()])
    return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def command(
    commands: Any, name: str, handler: Handler, *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Declare one command, run by ``handler``; the global options are accepted on it too."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=description or help, parents=[_parent()]
    )
    parser.set_defaults(command_function=handler)
    return parser
