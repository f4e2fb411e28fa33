"""``python -m bench``: run every benchmark module and print one table.

A benchmark is a module of this package listed in :data:`BENCHMARKS` that exposes
``run(quick: bool) -> list[Result]``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import sqlalchemy

from .common import Result, format_table
from .fixtures import MYSQL_URL_ENVS, PG_URL_ENVS, cleanup

BENCHMARKS: Final = (
    "write_path",
    "store_writes",
    "poll_cost",
    "loop_lag",
    "claims",
    "wakeup",
    "open_cost",
    "copy_memory",
    "transitions",
    "drain",
    "dashboard",
    "prune",
    "search",
)

Runner = Callable[[bool], list[Result]]


def _load(name: str) -> Runner:
    module = importlib.import_module(f"{__package__}.{name}")
    runner: Runner = module.run
    return runner


def _environment() -> dict[str, str]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": _load_average(),
    }


def _load_average() -> str:
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run (noisy numbers)")
    parser.add_argument(
        "--only",
        action="append",
        choices=BENCHMARKS,
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument(
        "--pg-url",
        metavar="URL",
        help="also measure on this PostgreSQL server (benchmarks create and drop databases "
        f"on it); env: {PG_URL_ENVS[0]}, else {PG_URL_ENVS[1]}; without one, PostgreSQL "
        "cases are skipped",
    )
    parser.add_argument(
        "--mysql-url",
        metavar="URL",
        help="also measure batch claims on this MariaDB/MySQL server; env: "
        f"{MYSQL_URL_ENVS[0]}, else {MYSQL_URL_ENVS[1]}; without one, they are skipped",
    )
    args = parser.parse_args(argv)
    if args.pg_url:
        os.environ[PG_URL_ENVS[0]] = args.pg_url
    if args.mysql_url:
        os.environ[MYSQL_URL_ENVS[0]] = args.mysql_url

    environment = _environment()
    print(" · ".join(f"{key} {value}" for key, value in environment.items()), flush=True)
    results: list[Result] = []
    began = time.perf_counter()
    try:
        for name in args.only or BENCHMARKS:
            started = time.perf_counter()
            quick = " (quick)" if args.quick else ""
            print(f"running {name}{quick} ...", flush=True, file=sys.stderr)
            results.extend(_load(name)(args.quick))
            print(f"  {name}: {time.perf_counter() - started:.1f} s", flush=True, file=sys.stderr)
    except BaseException:
        if results:  # what was measured before the failure is still worth seeing
            print(format_table(results), flush=True)
        raise
    finally:
        cleanup()  # the large fixtures of this run
    elapsed = time.perf_counter() - began
    print(f"all: {elapsed:.1f} s, load average now {_load_average()}", flush=True, file=sys.stderr)

    print(format_table(results))
    if args.json is not None:
        document = {
            "environment": environment,
            "quick": args.quick,
            "results": [result.as_dict() for result in results],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
