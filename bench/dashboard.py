"""Dashboard page load with 100 Server-Sent-Events clients attached, against none (issue 14).

Target: 100 concurrent SSE clients on loopback do not slow the page below 200 ms per load.

Two ``hermes-state dashboard`` processes serve the same SQLite file (10,000 sessions, a few
hundred handoffs in every state): one with 100 ``/events`` clients attached (held by a child
process, ``python -m bench.dashboard clients``, that reads every event as it comes), the other
with none. Meanwhile a writer makes ~20 transitions a second, so both dashboards follow a
moving audit trail and the attached one fans each event out to its 100 clients. A round loads
``/`` (the whole overview: counts, running rows, failures, a page of 50 handoffs) a few times
from each dashboard, on a new connection each time as a reload does, alternating which goes
first. Baseline: the dashboard without clients. The note gives both medians against the target.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import signal
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from hermes_state import SessionDB

from . import fixtures
from .common import BenchmarkError, Result, format_seconds, interleaved, summarize

__all__ = ["run"]

NAME: Final = "dashboard"
CLIENTS: Final = 100
TARGET_S: Final = 0.200
SESSIONS: Final = 10_000
READY_TIMEOUT: Final = 60.0
WRITE_GAP: Final = 0.05
CLI: Final = (sys.executable, "-m", "hermes_state.cli")
CLIENTS_CHILD: Final = (sys.executable, "-m", "bench.dashboard", "clients")


class Dashboard:
    """A ``hermes-state dashboard`` child on a free loopback port."""

    def __init__(self, database: Path) -> None:
        self.process = subprocess.Popen(
            [*CLI, "--url", str(database), "dashboard", "--port", "0"],
            env=fixtures.child_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("dashboard on http://"):
            self.stop()
            raise BenchmarkError(f"the dashboard did not start: {line!r}")
        host_port = line.removeprefix("dashboard on http://").strip().rstrip("/")
        host, _, port = host_port.rpartition(":")
        self.host, self.port = host, int(port)

    def load(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("GET", "/")
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status != 200 or b'id="handoffs"' not in body:
            raise BenchmarkError(f"page load answered {response.status}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _build(path: Path) -> None:
    fixtures.copy_sqlite(fixtures.sqlite_sessions(SESSIONS), path)
    with SessionDB(path) as db:
        for index in range(1, 400):
            session_id = fixtures.session_id(index)
            if index % 20 == 0:  # completed already in the fixture
                continue
            db.request_handoff(session_id, "telegram")
            if index % 4 == 1:
                db.claim_handoff(session_id)
            if index % 4 == 2:
                db.claim_handoff(session_id)
                db.fail_handoff(session_id, f"platform error {index % 7}")


@contextlib.contextmanager
def _writer(path: Path) -> Iterator[None]:
    """A transition every WRITE_GAP seconds (request, then fail) on its own sessions."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with SessionDB(path) as db:
                ids = [f"bench-dashboard-writer-{index}" for index in range(20)]
                for session_id in ids:
                    db.create_session(session_id, "bench")
                turn = 0
                while not stop.wait(WRITE_GAP):
                    session_id = ids[turn % len(ids)]
                    turn += 1
                    if not db.request_handoff(session_id, "telegram"):
                        db.fail_handoff(session_id, "bench")
        except BaseException as exc:  # reported by the benchmark, not lost in a thread
            failures.append(exc)

    thread = threading.Thread(target=write, name="bench-dashboard-writer")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if failures:
        raise BenchmarkError(f"the writer failed: {failures[0]!r}")


@contextlib.contextmanager
def _clients(dashboard: Dashboard, count: int) -> Iterator[subprocess.Popen[str]]:
    """``count`` SSE clients attached to ``dashboard``, held by a child process."""
    child = subprocess.Popen(
        [*CLIENTS_CHILD, dashboard.host, str(dashboard.port), str(count)],
        env=fixtures.child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().strip()
        if ready != f"ready {count}":
            raise BenchmarkError(f"the SSE clients did not attach: {ready!r}")
        yield child
    finally:
        if child.poll() is None:
            child.terminate()
        child.wait(timeout=30)


def _events_received(child: subprocess.Popen[str]) -> int:
    """Stop the clients' child; the events its clients received in all."""
    child.terminate()
    output, _ = child.communicate(timeout=30)
    for line in output.splitlines():
        if line.startswith("events "):
            return int(line.split()[1])
    raise BenchmarkError("the SSE clients' process did not report what it received")


def run(quick: bool) -> list[Result]:
    rounds, loads = (8, 3) if quick else (30, 5)
    database = fixtures.scratch() / "dashboard.db"
    _build(database)
    idle, busy = Dashboard(database), Dashboard(database)
    try:
        with _clients(busy, CLIENTS) as child, _writer(database):
            phases = {"load": {"no SSE clients": _loads(idle, loads)}}
            phases["load"][f"{CLIENTS} SSE clients"] = _loads(busy, loads)
            samples = interleaved(phases, rounds=rounds, warmup=2, ops_per_round=loads)["load"]
            if child.poll() is not None:
                raise BenchmarkError("the SSE clients' process died during the run")
            received = _events_received(child)
    finally:
        idle.stop()
        busy.stop()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    met = all(value < TARGET_S for value in medians.values())
    note = (
        f"page load median {format_seconds(medians[f'{CLIENTS} SSE clients'])} with "
        f"{CLIENTS} clients, {format_seconds(medians['no SSE clients'])} without; "
        f"target < {format_seconds(TARGET_S)}: {'met' if met else 'NOT met'}; "
        f"{received / CLIENTS:.0f} events delivered to each client meanwhile"
    )
    return summarize(
        NAME,
        "GET / while events flow (SQLite, 10k sessions)",
        samples,
        baseline="no SSE clients",
        ops_per_round=loads,
        notes={f"{CLIENTS} SSE clients": note},
    )


def _loads(dashboard: Dashboard, count: int) -> Callable[[], None]:
    def batch() -> None:
        for _ in range(count):
            dashboard.load()

    return batch


# -- the child that holds the SSE clients ------------------------------------------------------


async def _hold(host: str, port: int, count: int) -> None:
    async def attach() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        await writer.drain()
        while b"retry:" not in await reader.readline():
            pass
        return reader, writer  # the writer too: a collected StreamWriter closes its socket

    clients = await asyncio.wait_for(
        asyncio.gather(*(attach() for _ in range(count))), READY_TIMEOUT
    )
    print(f"ready {len(clients)}", flush=True)

    received = [0]

    async def drain(reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(65536):
            received[0] += chunk.count(b"event: handoff")
        print("a stream ended", file=sys.stderr, flush=True)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    draining = asyncio.gather(*(drain(reader) for reader, _writer in clients))
    await asyncio.wait(
        [draining, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED"
    )
    print(f"events {received[0]}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard")
    parser.add_argument("role", choices=["clients"])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_hold(args.host, args.port, args.count))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
