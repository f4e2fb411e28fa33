"""A watcher process that stops dead at a chosen point of a delivery, for the crash kit
(tests/processes/test_crash_kit.py).

Two ways in:

* ``hermes-state watch --handler tests.support.crash_points:deliver`` — the real CLI watcher
  with this module's handler. With ``CRASH_POINT=handler`` the handler marks and then hangs.
* ``python -m tests.support.crash_points --db PATH_OR_URL --owner NAME --point POINT`` — the same
  ``GatewayRunner`` over a store that marks and hangs just after a successful claim
  (``claimed``) or just before recording the completion (``completing``), points the CLI's
  handler cannot reach.

"Marks" means: writes ``$CRASH_DIR/<point>.marker`` (atomically, with the session id). "Hangs"
means: waits for ``$CRASH_DIR/never``, a file nobody creates, so the test can SIGKILL the process
exactly there. Every call of the handler is appended to ``$CRASH_DIR/deliveries.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gateway.run import GatewayRunner
from hermes_state import SessionDB
from hermes_state.plans import ClaimBatch

POINTS = ("claimed", "handler", "completing", "none")


def crash_dir() -> Path:
    return Path(os.environ["CRASH_DIR"])


def current_point() -> str:
    return os.environ.get("CRASH_POINT", "none")


def mark(point: str, session_id: str) -> None:
    """Announce that this process reached ``point`` (write then rename: never half a file)."""
    folder = crash_dir()
    partial = folder / f".{point}.{os.getpid()}"
    partial.write_text(f"{session_id} {os.getpid()}\n")
    os.replace(partial, folder / f"{point}.marker")


def hang() -> None:
    """Block this thread until killed: the file it waits for never appears."""
    never = crash_dir() / "never"
    while not never.exists():
        time.sleep(0.05)
    raise RuntimeError(f"{never} appeared; nothing should ever create it")


def deliver(row: Mapping[str, Any], profile_name: str | None) -> None:
    """The delivery: log it, then (at the ``handler`` point) mark and hang inside it."""
    with (crash_dir() / "deliveries.log").open("a") as log:
        log.write(f"{row['id']} {os.getpid()}\n")
    if current_point() == "handler":
        mark("handler", str(row["id"]))
        hang()


class StoppingStore(SessionDB):
    """A real store that stops right after a won claim, or right before a completion is
    recorded: the watcher's batch calls (``claim_handoffs``, ``finish_handoffs``) and the
    one-row calls alike."""

    def __init__(self, *args: Any, point: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.point = point

    def claim_handoff(self, session_id: str) -> bool:
        won = super().claim_handoff(session_id)
        if won and self.point == "claimed":
            mark("claimed", session_id)
            hang()
        return won

    def claim_handoffs(self, session_ids: Iterable[str], **options: Any) -> ClaimBatch:
        return self._stop_after(super().claim_handoffs(session_ids, **options))

    def claim_next_handoffs(self, limit: int, **options: Any) -> ClaimBatch:
        return self._stop_after(super().claim_next_handoffs(limit, **options))

    def _stop_after(self, batch: ClaimBatch) -> ClaimBatch:
        if batch.rows and self.point == "claimed":
            mark("claimed", batch.rows[0]["id"])
            hang()
        return batch

    def complete_handoff(self, session_id: str) -> bool:
        if self.point == "completing":
            mark("completing", session_id)
            hang()
        return super().complete_handoff(session_id)

    def finish_handoffs(self, outcomes: Mapping[str, object], **options: Any) -> dict[str, bool]:
        completing = [session_id for session_id, error in outcomes.items() if error is None]
        if completing and self.point == "completing":
            mark("completing", completing[0])
            hang()
        return super().finish_handoffs(outcomes, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--point", choices=POINTS, required=True)
    args = parser.parse_args()
    os.environ["CRASH_POINT"] = args.point
    store = StoppingStore(args.db, owner=args.owner, lease_seconds=60.0, point=args.point)
    runner = GatewayRunner(store, deliver, interval=0.02)

    asyncio.run(runner.serve())


if __name__ == "__main__":
    main()
