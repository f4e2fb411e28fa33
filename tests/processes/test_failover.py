"""A PostgreSQL failover under load, as an operator would stage it (opt in: ``-m failover``).

A primary and a synchronous hot standby are built from the PostgreSQL binaries on this
machine (``initdb``, ``pg_basebackup``, ``pg_ctl``; run as the ``postgres`` user when the test
runs as root, since ``initdb`` refuses root), on loopback ports of their own, in a temporary
folder, all stopped at the end. Two real ``hermes-state watch`` gateways and a requester
reach them through one libpq multi-host URL with ``target_session_attrs=read-write``. Mid
run the primary's postmaster and its backends are SIGKILLed (the host is lost) and, a few
seconds later, the standby is promoted. Then:

* nothing acknowledged is lost: every request that returned True has its row on the new
  primary, and no row is left pending or running;
* nothing is delivered twice, and no delivered row ends failed;
* both gateways live on, and each writes a bounded number of log lines.

The measured times (the outage, the first delivery after the promotion) are printed; see
docs/failover.md. MariaDB has no equivalent here: see the same page.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_state import SessionDB
from hermes_state.engine import make_engine, resolve_url
from hermes_state.errors import HermesStateError
from tests.support.processes import Watcher, cli_argv, wait_until

pytestmark = [pytest.mark.failover, pytest.mark.timeout(600)]

BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)
TOOLS = ("initdb", "pg_basebackup", "pg_ctl", "postgres")
LEASE = 10.0
HANDLER = (
    'echo "$HERMES_SESSION_ID $(date +%s.%N) $HERMES_HANDOFF_OWNER" >> "$DELIVERIES"; sleep 0.3'
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """A primary and a synchronous standby in ``folder``, run as ``user`` (None: this one)."""

    def __init__(self, folder: Path, user: str | None) -> None:
        assert BIN is not None
        self.folder = folder
        self.user = user
        self.primary = folder / "primary"
        self.standby = folder / "standby"
        self.ports = (free_port(), free_port())

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        assert BIN is not None
        argv = [str(BIN / tool), *args]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)

    def _configure(self, data: Path, port: int, extra: str = "") -> None:
        with (data / "postgresql.auto.conf").open("a") as conf:
            conf.write(
                f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\n"
                "wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n"
                "fsync = off\nshared_buffers = 16MB\n" + extra
            )

    def start(self) -> None:
        self.run("initdb", "-D", str(self.primary), "-U", "root", "-A", "trust")
        self._configure(
            self.primary,
            self.ports[0],
            "synchronous_standby_names = 'standby1'\nsynchronous_commit = on\n",
        )
        self.run("pg_ctl", "-D", str(self.primary), "-l", f"{self.primary}.log", "-w", "start")
        self.run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.ports[0]), "-U", "root"),
            *("-D", str(self.standby), "-R", "-X", "stream"),
        )
        self._configure(
            self.standby,
            self.ports[1],
            f"primary_conninfo = 'host=127.0.0.1 port={self.ports[0]} user=root "
            "application_name=standby1'\n"
            # The copy took the primary's list of synchronous standbys; once promoted, with no
            # standby left, it would hold every commit forever. (A failover manager rewrites
            # this setting as standbys come and go: Patroni's synchronous_mode.)
            "synchronous_standby_names = ''\n",
        )
        self.run("pg_ctl", "-D", str(self.standby), "-l", f"{self.standby}.log", "-w", "start")
        wait_until(self._synchronous, "the standby to be synchronous", 60)

    def _synchronous(self) -> bool:
        found = self.sql(
            self.ports[0], "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
        )
        return found.strip() == "1"

    def sql(self, port: int, statement: str, database: str = "postgres") -> str:
        assert BIN is not None
        finished = subprocess.run(
            [
                str(BIN / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "root",
                "-d",
                database,
                "-tAc",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return finished.stdout

    def url(self, database: str) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"postgresql://root@{hosts}/{database}?target_session_attrs=read-write"

    def lose_the_primary(self) -> None:
        """SIGKILL the primary's postmaster and every process it started: its host is gone."""
        pid = int((self.primary / "postmaster.pid").read_text().split()[0])
        children = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _parent_of(entry) == pid
        ]
        for victim in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)

    def promote(self) -> None:
        self.run("pg_ctl", "-D", str(self.standby), "-w", "promote")

    def stop(self) -> None:
        for data in (self.standby, self.primary):
            if (data / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.SubprocessError):
                    self.run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")


def _parent_of(entry: Path) -> int | None:
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if BIN is None or not all((BIN / tool).exists() for tool in TOOLS):
        pytest.skip("the PostgreSQL server binaries (initdb, pg_basebackup, pg_ctl) are absent")
    user = None
    if os.geteuid() == 0:  # initdb refuses root
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root with no postgres user to run initdb as")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser to run initdb as postgres")
        user = "postgres"
    folder = Path(tempfile.mkdtemp(prefix="hs-failover-"))
    if user is not None:
        shutil.chown(folder, user)
    built = Cluster(folder, user)
    try:
        built.start()
        yield built
    finally:
        built.stop()
        shutil.rmtree(folder, ignore_errors=True)


class Requester(threading.Thread):
    """Creates sessions and requests their handoff, one every ``pace`` s, until stopped;
    keeps the ids whose request was acknowledged (returned True)."""

    def __init__(self, url: str, pace: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.pace = pace
        self.acknowledged: list[str] = []
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        number = 0
        db: SessionDB | None = None
        while not self.stopping.is_set():
            session_id = f"s{number:05d}"
            try:
                if db is None:
                    db = SessionDB(url=self.url)
                db.create_session(session_id, "cli")
                if db.request_handoff(session_id, "telegram"):
                    self.acknowledged.append(session_id)
                number += 1
            except HermesStateError:
                self.refused += 1  # the outage: this one again, after a pause
                time.sleep(0.2)
                continue
            time.sleep(self.pace)
        if db is not None:
            db.close()


def test_a_primary_lost_mid_run_loses_nothing_acknowledged(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.sql(cluster.ports[0], "CREATE DATABASE hermes")
    url = cluster.url("hermes")
    upgraded = subprocess.run(
        cli_argv(url, "db", "upgrade"), capture_output=True, text=True, timeout=120
    )
    assert upgraded.returncode == 0, upgraded.stderr
    deliveries = tmp_path / "deliveries"
    env = {**os.environ, "DELIVERIES": str(deliveries)}
    gateways = [
        Watcher(
            cli_argv(
                url,
                "watch",
                *("--owner", owner, "--lease-seconds", str(LEASE), "--interval", "0.2"),
                *("--exec", HANDLER),
            ),
            env,
            name=owner,
        )
        for owner in ("gateway-a", "gateway-b")
    ]
    requester = Requester(url)
    try:
        for gateway in gateways:
            gateway.wait_for_line("watching")
        requester.start()
        wait_until(lambda: len(delivered(deliveries)) >= 20, "deliveries before the loss")
        lines_before = [len(gateway.lines) for gateway in gateways]
        lost_at = time.time()
        cluster.lose_the_primary()
        time.sleep(3.0)
        cluster.promote()
        promoted_at = time.time()
        time.sleep(5.0)
        requester.stopping.set()
        requester.join(60)
        acknowledged = set(requester.acknowledged)

        def settled() -> bool:
            states = handoff_states(url)
            return all(states.get(sid) in ("completed", "failed") for sid in acknowledged)

        try:
            wait_until(settled, "every acknowledged request to settle", LEASE * 4)
        except BaseException:
            states = handoff_states(url)
            unsettled = {sid: states.get(sid) for sid in acknowledged}
            unsettled = {k: v for k, v in unsettled.items() if v not in ("completed", "failed")}
            print("UNSETTLED", unsettled)
            for gateway in gateways:
                print("----", gateway.name, "\n", "".join(gateway.lines[-80:]))
            raise
        for gateway in gateways:
            gateway.assert_alive()
    finally:
        requester.stopping.set()
        for gateway in gateways:
            gateway.kill()

    states = handoff_states(url)
    runs = delivered(deliveries)
    ids = [sid for sid, _at, _owner in runs]
    twice = sorted({sid for sid in ids if ids.count(sid) > 1})
    assert not twice, f"delivered twice: {twice}"
    lost = sorted(acknowledged - states.keys())
    assert not lost, f"acknowledged and lost: {lost}"
    stuck = sorted(sid for sid, state in states.items() if state in ("pending", "running"))
    assert not stuck, f"stuck: {stuck}"
    failed_after_delivery = sorted(sid for sid in ids if states.get(sid) == "failed")
    assert not failed_after_delivery, f"delivered, then failed: {failed_after_delivery}"
    after = [at for _sid, at, _owner in runs if at > promoted_at]
    first_after = min(after) - promoted_at if after else None
    # What the outage wrote: warnings and worse (claims and completions go on at INFO).
    outage_lines = [
        sum(" WARNING " in line or " ERROR " in line for line in g.lines[before:])
        for g, before in zip(gateways, lines_before, strict=True)
    ]
    print(
        f"\nfailover: {len(acknowledged)} acknowledged, {len(ids)} delivered, "
        f"{requester.refused} requests refused during the outage, "
        f"primary lost {promoted_at - lost_at:.1f} s before the promotion, first delivery "
        f"{first_after if first_after is None else round(first_after, 2)} s after it, "
        f"warning lines per gateway since the loss: {outage_lines}"
    )
    assert first_after is not None, "nothing was delivered after the promotion"
    assert max(outage_lines) <= 16, "\n".join(g.log for g in gateways)


def delivered(path: Path) -> list[tuple[str, float, str]]:
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            runs.append((parts[0], float(parts[1]), parts[2]))
    return runs


def handoff_states(url: str) -> dict[str, str]:
    """Every session's handoff state, read on the current primary."""
    engine = make_engine(resolve_url(url))
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, handoff_state FROM sessions"))
            return {row[0]: row[1] for row in rows if row[1] is not None}
    finally:
        engine.dispose()
