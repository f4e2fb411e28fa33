"""``python -m hermes_state.sql_docs [DIRECTORY] [--check]``: write or check the files."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from .rendering import render

#: The directory it writes by default, from the repository root.
DIRECTORY: Final = Path("docs/sql")


def _on_disk(directory: Path) -> set[Path]:
    found = {path.relative_to(directory) for path in directory.glob("*/*.sql")}
    if (directory / "index.md").exists():
        found.add(Path("index.md"))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_state.sql_docs")
    parser.add_argument("directory", nargs="?", default=DIRECTORY, type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    directory: Path = args.directory
    wanted = render()
    present = _on_disk(directory) if directory.is_dir() else set()
    stale = sorted(
        path
        for path in wanted
        if path not in present or (directory / path).read_text(encoding="utf-8") != wanted[path]
    )
    extra = sorted(present - wanted.keys())
    if args.check:
        for path in stale:
            state = "missing" if path not in present else "out of date"
            print(f"{directory / path}: {state}")
        for path in extra:
            print(f"{directory / path}: no operation sends it any more")
        if stale or extra:
            print(f"run {parser.prog} to rewrite {directory}")
            return 1
        return 0
    for path in stale:
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(wanted[path], encoding="utf-8")
    for path in extra:
        (directory / path).unlink()
    return 0
