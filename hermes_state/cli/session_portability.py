"""``hermes-state session export`` and ``session import``: sessions as JSONL, one a line."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from ..errors import HermesStateError, InvalidInputError
from ..plans import portability
from .common import MAX_ROWS, Output, Result, add_option, command, open_store, whole_number

if TYPE_CHECKING:
    from ..store import SessionDB

#: The longest line an import reads (a session's JSON is at most 5 MiB; room for spacing).
MAX_LINE_BYTES: Final = 8 * 1024 * 1024
#: The most sessions one file may hold (``export_all``'s bound).
MAX_FILE_SESSIONS: Final = portability.EXPORT_ALL_SESSIONS
#: How many session ids a page of the listing reads while an export gathers them.
_PAGE: Final = 1_000


def configure(actions: Any) -> None:
    configure_export(actions)
    configure_import(actions)


# -- export ---------------------------------------------------------------------------------------


def configure_export(actions: Any) -> None:
    parser = command(
        actions,
        "export",
        run_export,
        help="write sessions with their transcripts as JSONL, one session a line",
        description="Write sessions (every one, those of --source, or the ids given) with their "
        "live transcripts as JSONL, one session a line, in the format upstream's `hermes "
        "sessions export` writes; to stdout, or to --output. Every session is checked against "
        "the export limit before the first line is written.",
    )
    parser.add_argument(
        "session_ids", nargs="*", metavar="ID", help="sessions to export (an id or a unique prefix)"
    )
    add_option(
        parser, "--source", env="HERMES_STATE_SOURCE", metavar="SRC", help="only this source"
    )
    add_option(
        parser,
        "-o",
        "--output",
        env="HERMES_STATE_EXPORT_OUTPUT",
        metavar="FILE",
        help="write to FILE (a new file: see --force) instead of stdout ('-')",
    )
    add_option(
        parser,
        "--force",
        env="HERMES_STATE_EXPORT_FORCE",
        flag=True,
        help="replace an existing --output file",
    )
    add_option(
        parser,
        "--max-messages",
        env=portability.EXPORT_LIMIT_ENV,
        kind=whole_number(0, MAX_ROWS),
        metavar="N",
        help=f"refuse a session with more than N live messages (0 up to {MAX_ROWS}; default "
        f"{portability.MAX_SAFE_EXPORT_MESSAGES}; 0: no limit)",
    )


def _chosen(db: SessionDB, args: argparse.Namespace) -> list[str]:
    """The ids to export: the ones given (resolved, each once), else every session."""
    if args.session_ids:
        if args.source:
            raise InvalidInputError("give session ids or --source, not both")
        ids: list[str] = []
        for given in args.session_ids:
            found = db.resolve_session_id(given)
            if found is None:
                raise InvalidInputError(f"no session {given!r} (nor one unique id starting so)")
            ids.append(found)
        return list(dict.fromkeys(ids))
    ids = []
    while len(ids) < MAX_FILE_SESSIONS:
        page = db.search_sessions(source=args.source or None, limit=_PAGE, offset=len(ids))
        ids += [row["id"] for row in page]
        if len(page) < _PAGE:
            break
    return list(dict.fromkeys(ids))[:MAX_FILE_SESSIONS]


def _line(session: dict[str, Any]) -> str:
    return json.dumps(session, ensure_ascii=False, default=str) + "\n"


@contextlib.contextmanager
def _destination(output: str | None, force: bool) -> Iterator[IO[str]]:
    """Stdout, or a temporary file beside ``output`` renamed onto it once complete (removed
    on any failure, so a half-written export never takes the name)."""
    if output is None or output == "-":
        yield sys.stdout
        return
    target = Path(output).expanduser()
    if target.is_dir():
        raise InvalidInputError(f"{target} is a folder; give the path of a file to write")
    if target.exists() and not force:
        raise InvalidInputError(f"{target} exists; choose another name or pass --force")
    if not target.parent.is_dir():
        raise InvalidInputError(f"{target.parent} is not a folder; create it first")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            yield stream
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def run_export(args: argparse.Namespace, out: Output) -> Result:
    to_stdout = args.output is None or args.output == "-"
    if to_stdout and out.as_json:
        raise InvalidInputError("--json needs --output FILE: stdout carries the sessions")
    limit = portability.resolved_max_export_messages()
    if args.max_messages is not None:
        limit = args.max_messages
    with open_store(args, read_only=True) as db:
        ids = _chosen(db, args)
        if limit:  # every session checked before the first line is written
            for session_id in ids:
                db.assert_export_safe(session_id, max_messages=limit)
        written = 0
        messages = 0
        with _destination(args.output, args.force) as stream:
            for session_id in ids:
                session = db.export_session(session_id)
                if session is None:  # deleted meanwhile
                    continue
                stream.write(_line(session))
                written += 1
                messages += len(session["messages"])
            stream.flush()
    document = {"exported": written, "messages": messages, "output": args.output or "-"}
    summary = f"exported {written} session(s), {messages} message(s)"
    if to_stdout:
        print(f"hermes-state: {summary}", file=out.stderr)
        return Result(document, [])
    return Result(document, [f"{summary} to {args.output}"])


# -- import ---------------------------------------------------------------------------------------


def configure_import(actions: Any) -> None:
    parser = command(
        actions,
        "import",
        run_import,
        help="import sessions from a JSONL export (ids already stored are skipped)",
        description="Import the sessions of a JSONL file as `session export` or upstream's "
        "`hermes sessions export` write it ('-': stdin). Every line is read and checked "
        "first: a malformed line is reported with its number and nothing is imported. A "
        "session whose id is already stored is skipped, so importing a file twice changes "
        "nothing the second time.",
    )
    parser.add_argument("file", metavar="FILE", help="the JSONL file ('-' for stdin)")
    add_option(
        parser,
        "--dry-run",
        env="HERMES_STATE_DRY_RUN",
        flag=True,
        help="check every line and count what would be imported or skipped; write nothing",
    )


def _lines(path: str) -> Iterator[tuple[int, bytes]]:
    """The file's lines with their numbers (from 1), each at most :data:`MAX_LINE_BYTES`."""
    if path == "-":
        yield from _numbered(sys.stdin.buffer)
        return
    source = Path(path).expanduser()
    if source.is_dir():
        raise InvalidInputError(f"{source} is a folder; give a JSONL file")
    try:
        stream = source.open("rb")
    except FileNotFoundError:
        raise InvalidInputError(f"there is no file {source}") from None
    except PermissionError:
        raise InvalidInputError(f"{source} cannot be read (permission denied)") from None
    with stream:
        yield from _numbered(stream)


def _numbered(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    number = 0
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            raise InvalidInputError(
                f"line {number}: longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB, more than "
                "a session may hold; nothing was imported"
            )
        yield number, line


class _Parsed:
    """The sessions of a file, each with its line number."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, Any]] = []
        self.lines: list[int] = []


def _read(path: str) -> _Parsed:
    parsed = _Parsed()
    seen: dict[str, int] = {}
    for number, raw in _lines(path):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            session = json.loads(raw.rstrip(b"\r\n").decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidInputError(f"{where}: not UTF-8 text; nothing was imported") from None
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{where}: not JSON ({exc.msg} at column {exc.colno}); nothing was imported"
            ) from None
        except ValueError as exc:  # a number too long to read, for one
            raise InvalidInputError(f"{where}: not JSON ({exc}); nothing was imported") from None
        if not isinstance(session, dict):
            kind = type(session).__name__
            raise InvalidInputError(
                f"{where}: a session must be a JSON object, not {kind}; nothing was imported"
            )
        session_id = str(session.get("id") or "").strip()
        if session_id and session_id in seen:
            raise InvalidInputError(
                f"{where}: session {session_id!r} is already on line {seen[session_id]}; "
                "nothing was imported"
            )
        seen[session_id] = number
        if len(parsed.sessions) >= MAX_FILE_SESSIONS:
            raise InvalidInputError(
                f"{where}: a file may hold at most {MAX_FILE_SESSIONS} sessions; split it"
            )
        parsed.sessions.append(session)
        parsed.lines.append(number)
    return parsed


def _batches(parsed: _Parsed) -> list[list[int]]:
    """The sessions (by position) in groups within one import's caps: each group is one
    ``import_sessions`` call, one transaction."""
    groups: list[list[int]] = [[]]
    messages = size = 0
    for position, session in enumerate(parsed.sessions):
        count = len(session["messages"]) if isinstance(session.get("messages"), list) else 0
        weight = portability.json_size(session) or 0
        current = groups[-1]
        if current and (
            len(current) >= portability.IMPORT_MAX_SESSIONS
            or messages + count > portability.IMPORT_MAX_TOTAL_MESSAGES
            or size + weight > portability.IMPORT_MAX_TOTAL_BYTES
        ):
            groups.append([])
            messages = size = 0
        groups[-1].append(position)
        messages += count
        size += weight
    return [group for group in groups if group]


def _refusal(parsed: _Parsed, group: list[int], errors: list[dict[str, Any]]) -> str:
    shown = []
    for error in errors[:5]:
        position = group[int(error["index"])]
        session = f" (session {error['session_id']!r})" if error.get("session_id") else ""
        shown.append(f"line {parsed.lines[position]}{session}: {error['error']}")
    more = f"; and {len(errors) - 5} more" if len(errors) > 5 else ""
    return "; ".join(shown) + more + "; nothing was imported"


def run_import(args: argparse.Namespace, out: Output) -> Result:
    parsed = _read(args.file)
    groups = _batches(parsed)
    for group in groups:  # every line checked before the first write
        problems = portability.import_problems([parsed.sessions[i] for i in group])
        if problems:
            raise InvalidInputError(_refusal(parsed, group, problems))
    if args.dry_run:
        return _dry_import(args, parsed)
    totals = {"imported": 0, "skipped": 0, "detached": 0}
    with open_store(args) as db:
        for done, group in enumerate(groups):
            result = db.import_sessions([parsed.sessions[i] for i in group])
            if not result["ok"]:
                message = _refusal(parsed, group, result["errors"])
                if done:
                    message = message.replace(
                        "nothing was imported",
                        f"the first {sum(map(len, groups[:done]))} sessions were imported "
                        "(run the import again once fixed: they are skipped)",
                    )
                raise HermesStateError(message)
            for key in totals:
                totals[key] += int(result[key])
    document = {**totals, "sessions": len(parsed.sessions), "file": args.file}
    text = (
        f"imported {totals['imported']} session(s), skipped {totals['skipped']} already stored"
        + (f", {totals['detached']} detached from a missing parent" if totals["detached"] else "")
    )
    return Result(document, [text])


def _dry_import(args: argparse.Namespace, parsed: _Parsed) -> Result:
    with open_store(args, read_only=True) as db:
        stored = sum(
            db.get_session(str(session.get("id") or "").strip()) is not None
            for session in parsed.sessions
        )
    document = {
        "dry_run": True,
        "imported": len(parsed.sessions) - stored,
        "skipped": stored,
        "sessions": len(parsed.sessions),
        "file": args.file,
    }
    return Result(
        document,
        [
            f"dry run: every line passes its checks; would import {document['imported']} "
            f"session(s) and skip {stored} already stored"
        ],
    )
