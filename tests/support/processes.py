"""Real processes, and waiting for things without fixed sleeps.

* ``wait_until`` / ``eventually``: poll a check until it holds, or fail the test at a deadline
  (the deadline is only reached when something is broken; it is never a synchronisation tool).
  ``eventually`` is the asyncio twin: it runs the check in a thread, as it may read a database.
* ``cli_argv`` / ``run_cli``: ``hermes-state --url URL ...`` as a separate interpreter
  (``python -m hermes_state.cli``), to build a command line or to run one to its end.
* ``CONSOLE`` / ``console``: the installed ``hermes-state`` console script itself, run to its
  end with its output captured (``--url`` is not added: the test places every option).
  ``in_process`` runs the same command line through ``hermes_state.cli.main`` in this process
  and answers in the same shape, for the tests that need no process of their own.
* ``Watcher``: a long-running ``hermes-state`` process (``watch``) whose log (stderr) is
  collected line by line as it comes.
* ``DashboardProcess``: ``hermes-state dashboard`` on a free loopback port, its address read
  from the line it prints once listening.
* ``kill_group`` / ``group_is_gone`` / ``read_pid``: process groups, such as the one each
  delivery command of a watcher leads, and the pid files those commands write.
* ``in_forked_child``: run a check in a ``fork()``ed copy of this process and hear its verdict.
* ``FORKSERVER``: the multiprocessing context the racing tests start their processes from.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest
from sqlalchemy.engine import URL

__all__ = [
    "CLI",
    "CONSOLE",
    "DEADLINE",
    "FORKSERVER",
    "DashboardProcess",
    "Watcher",
    "cli_argv",
    "console",
    "eventually",
    "group_is_gone",
    "in_forked_child",
    "in_process",
    "kill_group",
    "process_is_gone",
    "read_pid",
    "run_cli",
    "wait_until",
]

DEADLINE = 30.0  # seconds; only reached when something is broken
POLL = 0.01  # seconds between two looks at a check
CLI = [sys.executable, "-m", "hermes_state.cli"]
#: Racing processes are forked from a server process that has imported the store and its
#: drivers once ("forkserver"): each child starts clean (no thread, connection or event loop of
#: the test's own is inherited, as "fork" would), without paying a new interpreter's imports
#: (about a second here, as "spawn" would).
FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["hermes_state", "tests.support.stores", "psycopg", "pymysql"])
#: The console script pip installed next to this interpreter.
CONSOLE = str(Path(sys.executable).with_name("hermes-state"))


# -- waiting -------------------------------------------------------------------------------------


def wait_until(check: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    """Poll ``check`` until it is true; fail the test after ``deadline`` seconds."""
    give_up_at = time.monotonic() + deadline
    while not check():
        if time.monotonic() > give_up_at:
            pytest.fail(f"timed out after {deadline:g} s waiting for {what}")
        time.sleep(POLL)


async def eventually(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> None:
    """Poll a blocking ``check`` off the event loop (in a thread: it may touch a database)
    until it is true; fail the test after ``deadline`` seconds."""
    give_up_at = time.monotonic() + deadline
    while not await asyncio.to_thread(check):
        if time.monotonic() > give_up_at:
            pytest.fail(f"timed out after {deadline:g} s waiting for {what}")
        await asyncio.sleep(POLL)


# -- the command line as a process ---------------------------------------------------------------


def cli_argv(url: URL | Path | str, *argv: str) -> list[str]:
    """``python -m hermes_state.cli --url URL ARGV...``; a server URL keeps its password."""
    target = url.render_as_string(hide_password=False) if isinstance(url, URL) else str(url)
    return [*CLI, "--url", target, *argv]


def run_cli(
    url: URL | Path | str,
    *argv: str,
    env: Mapping[str, str] | None = None,
    timeout: float = DEADLINE,
) -> subprocess.CompletedProcess[str]:
    """Run ``hermes-state --url URL ARGV...`` in a new interpreter to its end, its output
    captured; the exit code is the caller's to check."""
    return _finished(cli_argv(url, *argv), env, timeout)


def console(
    *argv: str, env: Mapping[str, str] | None = None, timeout: float = DEADLINE
) -> subprocess.CompletedProcess[str]:
    """Run the ``hermes-state`` console script with exactly ``argv``, to its end, its output
    captured; the exit code is the caller's to check."""
    return _finished([CONSOLE, *argv], env, timeout)


def _finished(
    command: list[str], env: Mapping[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def in_process(
    *argv: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``console(*argv)`` without a new interpreter: ``hermes_state.cli.main`` run here, with
    ``env`` added to this process's environment for the call, its exit code and what it printed
    in the shape ``console`` returns. What only a process has (signals, pipes, a terminal, the
    exit status the script turns the code into, logging set up for the first time) is what
    ``console`` is for. No command may print a traceback, whatever the outcome."""
    from hermes_state.cli import main

    out, err = _Utf8Stream(), _Utf8Stream()
    with _environment(env or {}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    done = subprocess.CompletedProcess([CONSOLE, *argv], code, out.getvalue(), err.getvalue())
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout, done.stdout
    return done


class _Utf8Stream(io.StringIO):
    """Collected output that says it is UTF-8, as the console script's streams are here."""

    @property
    def encoding(self) -> str:
        return "utf-8"


@contextlib.contextmanager
def _environment(changes: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Watcher:
    """A ``hermes-state`` process whose stderr (its log) is collected line by line as it comes.

    ``name`` is how failure messages call it; ``deadline`` bounds each of its waits. With
    ``own_group`` it leads a process group of its own, and ``kill`` kills that whole group.
    With ``stdout_too`` its stdout is collected along with stderr, as one stream.
    """

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        *,
        name: str = "the watcher",
        own_group: bool = False,
        deadline: float = DEADLINE,
        stdout_too: bool = False,
    ) -> None:
        self.name = name
        self.own_group = own_group
        self.deadline = deadline
        self.process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_too else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if stdout_too else subprocess.PIPE,
            text=True,
            start_new_session=own_group,
        )
        self.lines: list[str] = []
        stream = self.process.stdout if stdout_too else self.process.stderr
        self._reader = threading.Thread(target=self._read, args=(stream,))
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, fragment: str) -> None:
        """Wait until ``fragment`` is in the log; fail if the process exits first."""
        wait_until(
            lambda: fragment in self.log or self.process.poll() is not None,
            f"{fragment!r} in the log of {self.name}",
            self.deadline,
        )
        assert fragment in self.log, f"{self.name} exited first; its log:\n{self.log}"

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"{self.name} exited; its log:\n{self.log}"

    def wait(self) -> int:
        """Wait for the process to exit by itself; its exit code."""
        try:
            code = self.process.wait(timeout=self.deadline)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit; its log:\n{self.log}")
        self._reader.join(timeout=self.deadline)
        return code

    def kill(self) -> None:
        """SIGKILL the process (its whole group with ``own_group``), and reap it."""
        if self.own_group:
            kill_group(self.process.pid)
        elif self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=self.deadline)
        self._reader.join(timeout=self.deadline)


class DashboardProcess:
    """``hermes-state --url URL dashboard --port 0`` as a process; ``base`` is its address.

    Use it as a context manager: entering waits for the line it prints once listening, leaving
    stops it (SIGTERM, then SIGKILL) and reaps it.
    """

    def __init__(
        self,
        url: URL | Path | str,
        *argv: str,
        token: str | None = None,
        deadline: float = DEADLINE,
    ) -> None:
        env = {**os.environ, "HERMES_STATE_DASHBOARD_TOKEN": token or ""}
        self.deadline = deadline
        # A file, not a pipe: a pipe nobody reads could fill up and stall the server.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the process)
        self.process = subprocess.Popen(
            cli_argv(url, "dashboard", "--port", "0", *argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.base = ""

    def __enter__(self) -> DashboardProcess:
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self._first_line()), daemon=True)
        reader.start()
        reader.join(self.deadline)
        line = found[0] if found else ""
        if not line.startswith("dashboard on "):
            self.stop()
            pytest.fail(f"the dashboard did not start: {line!r}\n{self.read_log()}")
        self.base = line.removeprefix("dashboard on ").strip().rstrip("/")
        return self

    def read_log(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def _first_line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.deadline)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=self.deadline)
        if self.process.stdout is not None:
            self.process.stdout.close()


# -- process groups and pid files ----------------------------------------------------------------


def kill_group(pgid: int | None) -> None:
    """SIGKILL the process group ``pgid`` (nothing for None, or a group that is gone)."""
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def process_is_gone(pid: int) -> bool:
    """True once ``pid`` has exited: no such process, or a zombie nobody reaped yet (an orphan
    whose new parent does not reap it has still stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def read_pid(pid_file: Path) -> int | None:
    """The pid a process wrote to ``pid_file``; None while there is none (yet)."""
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def in_forked_child(check: Callable[[], str | None]) -> str:
    """Run ``check`` in a forked child of this process and return its verdict: "ok" when it
    returned None, what it returned otherwise, or the exception it raised. The child reports
    on a pipe and ends with ``os._exit``, never returning into pytest."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:
        verdict = "ok"
        try:
            verdict = check() or "ok"
        except BaseException as exc:
            verdict = f"the child failed: {exc!r}"
        finally:
            os.write(writing, verdict.encode())
            os._exit(0)
    os.close(writing)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(reading) as pipe:
        verdict = pipe.read()
    assert os.waitstatus_to_exitcode(status) == 0
    return verdict
