"""``hermes-state demo``: the whole handoff life cycle on a temporary embedded database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HermesStateError, InvalidInputError
from ..store import SessionDB
from .common import Output, Result, add_option, command

if TYPE_CHECKING:
    from ..watcher import GatewayRunner

TRANSCRIPTS = {
    "alpha": [("user", "Summarise the design doc for me."), ("assistant", "Here is a summary...")],
    "bravo": [("user", "Remind me to water the plants at six.")],
    "charlie": [("user", "Draft a reply to the landlord."), ("assistant", "Dear landlord...")],
}
DEMO_OWNER = "demo-gateway"
PLATFORMS = {"alpha": "telegram", "bravo": "discord", "charlie": "slack"}

# The first gateway's delivery command: alpha arrives, bravo is refused by the platform, and
# charlie hangs (writing its pid so the demo can clean up after the crash).
FIRST_GATEWAY_COMMAND = (
    'case "$HERMES_SESSION_ID" in '
    'bravo) echo "discord refused the message (HTTP 403)" >&2; exit 1;; '
    'charlie) echo $$ > "$DEMO_PID_FILE"; exec sleep 60;; '
    "esac; cat > /dev/null"
)


def _wait_until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise HermesStateError(f"demo: timed out waiting for {what}")
        time.sleep(0.05)


def _states(db: SessionDB) -> dict[str, Mapping[str, Any] | None]:
    return {sid: db.get_handoff_state(sid) for sid in TRANSCRIPTS}


def _table(db: SessionDB, out: Output) -> None:
    out.narrate(f"    {'session':<9}{'state':<11}{'platform':<10}error")
    for sid, state in _states(db).items():
        assert state is not None
        error = state["error"] or ""
        out.narrate(f"    {sid:<9}{state['state'] or '-':<11}{state['platform'] or '-':<10}{error}")


def register(commands: Any) -> None:
    configure_demo(commands)


def configure_demo(commands: Any) -> None:
    demo = command(
        commands,
        "demo",
        run_demo,
        help="show the handoff life cycle on a temporary database (a few seconds)",
    )
    add_option(
        demo,
        "--keep",
        env="HERMES_STATE_DEMO_KEEP",
        flag=True,
        help="keep the temporary database and print its path",
    )


def run_demo(args: argparse.Namespace, out: Output) -> Result:
    if getattr(args, "url", None) is not None:
        # The story kills a gateway mid-delivery and reclaims its row: never on a real database.
        raise InvalidInputError(
            "demo runs on a temporary database of its own and never touches another; "
            "leave out --url and HERMES_STATE_URL (--keep keeps the temporary one)"
        )
    logging.getLogger("gateway").setLevel(logging.WARNING)  # the narrative says what happens
    folder = Path(tempfile.mkdtemp(prefix="hermes-state-demo-"))
    path = folder / "state.db"
    try:
        delivered, final = _tell(path, out)
    finally:
        # Also when the story stops early (Ctrl-C, a closed pipe, a timeout): no leftovers.
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if args.keep:
        out.narrate(f"\nkept {path}")
    return Result(
        {"database": str(path) if args.keep else None, "delivered": delivered, "final": final}
    )


def _tell(path: Path, out: Output) -> tuple[list[str], dict[str, Mapping[str, Any] | None]]:
    """The life cycle on the database at ``path``: who was delivered, and the final states."""
    folder = path.parent
    out.narrate(f"A temporary embedded database: {path}\n")
    with SessionDB(path) as db:
        out.narrate("1. Three sessions start in the terminal, each with a transcript.")
        for sid, messages in TRANSCRIPTS.items():
            db.create_session(sid, "cli", title=f"demo {sid}")
            for role, content in messages:
                db.append_message(sid, role, content)
        out.narrate("2. The user asks to continue each one on a messaging platform.")
        for sid, platform in PLATFORMS.items():
            db.request_handoff(sid, platform)
        _table(db, out)

        out.narrate(
            "\n3. A gateway (a separate `hermes-state watch --exec ...` process) claims them:"
        )
        out.narrate("   alpha is delivered, discord refuses bravo, and charlie's delivery hangs.")
        pid_file = folder / "charlie.pid"
        gateway = _start_gateway(path, pid_file)
        try:
            _wait_until(
                lambda: (
                    [s["state"] if s else None for s in _states(db).values()]
                    == ["completed", "failed", "running"]
                    and pid_file.exists()
                ),
                "the first gateway's deliveries",
            )
            out.narrate("4. The gateway crashes (SIGKILL) in the middle of charlie's delivery.")
        finally:
            gateway.kill()
            gateway.wait()
            _kill_pid_in(pid_file)
        _table(db, out)
        refused = not db.request_handoff("charlie", "slack")
        out.narrate(
            f"   charlie is stranded: a new request is {'refused' if refused else 'accepted'}."
        )

        out.narrate(
            "\n5. A new gateway starts; its startup reclaim fails the stranded row and tells"
        )
        out.narrate(
            "   the user how to retry (it may or may not have arrived: no blind re-delivery)."
        )
        delivered: list[str] = []
        runner = _second_gateway(db, delivered)
        asyncio.run(runner.run(ticks=1))
        _table(db, out)
        out.narrate("\n6. The user re-runs /handoff; the second gateway delivers it.")
        db.request_handoff("charlie", "slack")
        asyncio.run(runner.run(ticks=1))
        asyncio.run(runner.close())
        _table(db, out)
        out.narrate(f"   delivered by the second gateway: {', '.join(delivered)}")
        out.narrate(
            f"   charlie's transcript travelled along: {len(db.get_messages('charlie'))} messages"
        )
        return delivered, _states(db)


def _start_gateway(path: Path, pid_file: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "hermes_state.cli",
        "--url",
        str(path),
        "watch",
        "--owner",
        DEMO_OWNER,
        "--interval",
        "0.1",
        "--exec",
        FIRST_GATEWAY_COMMAND,
    ]
    environment = {**os.environ, "DEMO_PID_FILE": str(pid_file)}
    return subprocess.Popen(
        argv, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _kill_pid_in(pid_file: Path) -> None:
    """The hung delivery command outlives the crashed gateway (own process group): end it."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)


def _second_gateway(db: SessionDB, delivered: list[str]) -> GatewayRunner:
    """An in-process gateway; every ``run()`` starts with the startup reclaim, then polls."""
    from ..watcher import GatewayRunner

    async def deliver(row: Mapping[str, Any], profile_name: str | None) -> None:
        delivered.append(str(row["id"]))

    # The same owner as the crashed gateway: a restarted gateway recognises its own dead
    # claims and fails them at once, without waiting for their lease to expire.
    store = SessionDB(url=db.url, owner=DEMO_OWNER, lease_seconds=60)
    return GatewayRunner(store, deliver, interval=0.05, drain_timeout=5.0)


__all__ = ["configure_demo", "register", "run_demo"]
