"""A mutation check: switch each guarantee off in turn and show that the suite notices.

``python -m tests.support.mutants`` (from the project root, with the test extras installed)
copies the project to a temporary folder once per mutant, applies the mutant's textual patch to
the copy, and runs that mutant's test files there on SQLite alone (the server URLs are removed
from the environment), stopping at the first failure. A mutant is *caught* when the tests fail.
First, the same files run on an unpatched copy and must pass, or no verdict would mean anything.

A patch whose text is not found exactly once is an error, never a pass: when the code moves,
the entry must move with it. Adding a guarantee is one more ``Mutant`` in ``MUTANTS``.

Options: ``--list`` names the mutants; ``NAME...`` runs only those. Exit status 0 when every
mutant chosen was caught, 1 when one survived, 2 when a patch no longer applies or the
unpatched tests fail. Not part of the default test run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "*.db",
    "*.db-wal",
    "*.db-shm",
)
SERVER_ENVS = ("HERMES_STATE_TEST_PG_URL", "HERMES_STATE_TEST_MYSQL_URL")
RUN_LIMIT = 1800.0  # seconds for one run of a mutant's tests: a safety net only


@dataclass(frozen=True)
class Mutant:
    """One guarantee switched off: in ``path``, the text ``find`` (exactly once) becomes
    ``replace``; ``tests`` are the test files expected to notice."""

    name: str
    guarantee: str
    path: str
    find: str
    replace: str
    tests: tuple[str, ...]


MUTANTS = [
    Mutant(
        "claim-cas",
        "a claim is a compare-and-swap from pending: a running row cannot be claimed again",
        "hermes_state/statements/transitions.py",
        "        _one_session(state_is(HandoffState.PENDING)),\n        _claimed_values(),",
        "        _one_session(_state_in([HandoffState.PENDING, HandoffState.RUNNING])),\n"
        "        _claimed_values(),",
        ("tests/backends/test_transitions.py",),
    ),
    Mutant(
        "only-states",
        "fail_handoff(only_states=...) fails a row only from the states named",
        "hermes_state/plans/book.py",
        "from_states = require_only_states(only_states)",
        "from_states = require_only_states(None)",
        ("tests/backends/test_transitions.py",),
    ),
    Mutant(
        "fence-complete",
        "completion is fenced on the owner and the attempt this store claimed",
        "hermes_state/plans/book.py",
        "transition = statements.complete_handoff(fence)",
        "transition = statements.complete_handoff(statements.Fence.NONE)",
        ("tests/backends/test_ownership.py",),
    ),
    Mutant(
        "fence-fail",
        "failing a running row is fenced on the owner and the attempt this store claimed",
        "hermes_state/plans/book.py",
        "transition = statements.fail_handoff(from_states, fence)",
        "transition = statements.fail_handoff(from_states, statements.Fence.NONE)",
        ("tests/backends/test_ownership.py",),
    ),
    Mutant(
        "fence-attempt",
        "a store's earlier life (same owner) cannot finish the attempt its next life claimed",
        "hermes_state/statements/transitions.py",
        '        condition = and_(condition, _c.handoff_attempt == bindparam("attempt"))\n',
        "        pass\n",
        ("tests/backends/test_ownership.py",),
    ),
    Mutant(
        "batch-fence",
        "a batch completion finishes each row only under the attempt this store claimed",
        "hermes_state/statements/claims.py",
        '    return and_(condition, _c.handoff_owner == bindparam("owner"), same_attempt)',
        '    return and_(condition, _c.handoff_owner == bindparam("owner"))',
        ("tests/backends/test_sqlite_batches.py", "tests/backends/test_batch_claims.py"),
    ),
    Mutant(
        "lease-renewal",
        "renew_handoff_leases extends the leases this owner still holds",
        "hermes_state/plans/book.py",
        "if ownership is None or ownership.lease_seconds is None or not ids:",
        "if True:",
        ("tests/backends/test_ownership.py",),
    ),
    Mutant(
        "reclaim-scope",
        "a stale or expired reclaim leaves live leases of other gateways alone",
        "hermes_state/statements/transitions.py",
        "    if scope is ReclaimScope.ALL:\n        return running",
        "    if True:\n        return running",
        ("tests/backends/test_ownership.py",),
    ),
    Mutant(
        "only-our-files",
        "an SQLite file of another application is refused, never adopted or written",
        "hermes_state/schema.py",
        "    return FileState(FileKind.FOREIGN if tables else FileKind.NEW, None)",
        "    return FileState(FileKind.NEW, None)",
        ("tests/backends/test_file_ownership.py",),
    ),
    Mutant(
        "lease-upkeep",
        "a watcher renews the leases of its deliveries in flight",
        "hermes_state/watcher/upkeep.py",
        "        if offers.lease_renewal:",
        "        if False:",
        ("tests/processes/test_gateways.py",),
    ),
    Mutant(
        "report-before-flush",
        "a batched delivery is reported done only once its flush committed",
        "hermes_state/watcher/deliveries.py",
        "            outcome = _reported(session_id, error, await recorded)",
        "            outcome = _reported(session_id, error, True)",
        ("tests/watcher/test_watcher_flush.py",),
    ),
    Mutant(
        "batch-claim-turns",
        "a batch claim takes a row only together with its conversation's turn lease",
        "hermes_state/plans/claims.py",
        "            (winners if taken else held).append(session_id)",
        "            winners.append(session_id)",
        ("tests/backends/test_delivery_batches.py",),
    ),
    Mutant(
        "drain-flush",
        "the drain flushes the outcomes still queued before the watcher returns",
        "hermes_state/watcher/loop.py",
        "            await self.flusher.close()",
        "            pass",
        ("tests/processes/test_watch_pipeline.py",),
    ),
    Mutant(
        "reclaim-expired",
        "an expired-lease reclaim leaves rows without a lease alone",
        "hermes_state/statements/transitions.py",
        '        return and_(running, lease < bindparam("now"))',
        '        return and_(running, or_(lease.is_(None), lease < bindparam("now")))',
        ("tests/backends/test_ownership.py",),
    ),
]


def copy_project(into: Path) -> Path:
    project = into / "project"
    shutil.copytree(ROOT, project, ignore=IGNORE)
    return project


def apply(mutant: Mutant, project: Path) -> None:
    target = project / mutant.path
    source = target.read_text()
    found = source.count(mutant.find)
    if found != 1:
        raise PatchError(
            f"{mutant.name}: the text to patch occurs {found} times in {mutant.path}, "
            "not once; update its entry in tests/support/mutants.py"
        )
    target.write_text(source.replace(mutant.find, mutant.replace))


class PatchError(Exception):
    pass


def sqlite_only_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in SERVER_ENVS}
    env.pop("PYTHONPATH", None)
    return env


def check_imports_the_copy(project: Path) -> None:
    """The copy, not the installed checkout, must be what the tests import."""
    probe = "import hermes_state, gateway.run as r; print(hermes_state.__file__); print(r.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=project,
        env=sqlite_only_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    files = done.stdout.split()
    if done.returncode != 0 or not files or not all(Path(f).is_relative_to(project) for f in files):
        raise PatchError(f"the copy's tests would not import the copy: {done.stdout}{done.stderr}")


def run_tests(project: Path, tests: Sequence[str]) -> tuple[bool, str]:
    """Run ``tests`` in ``project`` on SQLite alone, stopping at the first failure: whether
    they passed, and pytest's last line."""
    # In this process (-n 0): -x then stops at the first failure, with no other worker going on.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
        cwd=project,
        env=sqlite_only_env(),
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else done.stderr.strip()[-200:]
    return done.returncode == 0, summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mutants", description=__doc__)
    parser.add_argument("names", nargs="*", help="run only these mutants (default: all)")
    parser.add_argument("--list", action="store_true", help="name the mutants and stop")
    args = parser.parse_args(argv)
    by_name = {mutant.name: mutant for mutant in MUTANTS}
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:16} {mutant.guarantee}")
        return 0
    unknown = [name for name in args.names if name not in by_name]
    if unknown:
        print(f"no mutant named {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    chosen = [by_name[name] for name in args.names] or MUTANTS

    with tempfile.TemporaryDirectory(prefix="hermes-mutants-") as scratch:
        try:
            baseline = copy_project(Path(scratch) / "baseline")
            check_imports_the_copy(baseline)
            files = sorted({test for mutant in chosen for test in mutant.tests})
            started = time.monotonic()
            passed, summary = run_tests(baseline, files)
            print(f"{'unpatched':16} {'passes' if passed else 'FAILS':9} {summary}", flush=True)
            if not passed:
                print("the unpatched tests must pass first", file=sys.stderr)
                return 2
            survivors = []
            for mutant in chosen:
                project = copy_project(Path(scratch) / mutant.name)
                apply(mutant, project)
                passed, summary = run_tests(project, mutant.tests)
                verdict = "SURVIVED" if passed else "caught"
                if passed:
                    survivors.append(mutant.name)
                print(f"{mutant.name:16} {verdict:9} {summary}", flush=True)
        except PatchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    minutes = (time.monotonic() - started) / 60
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} caught in {minutes:.1f} min")
    if survivors:
        print(f"not caught: {', '.join(survivors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
