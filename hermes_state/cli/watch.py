"""``hermes-state watch``: a handoff watcher delivering with a shell command or a function."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import importlib
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

from ..errors import DeliveryFailed, HermesStateError, InvalidInputError
from .common import (
    MAX_SECONDS,
    Output,
    Result,
    add_option,
    command,
    existing_url,
    finite_number,
    repeated,
    whole_number,
)

logger = logging.getLogger("hermes_state.watch")

#: Characters of the last stderr line of a failed command kept as the handoff error.
STDERR_TAIL: Final = 400
#: Default of ``--exec-timeout``: a delivery command running longer is killed and failed.
DEFAULT_EXEC_TIMEOUT: Final = 600.0
#: After SIGTERM, how long a handler's process group has before SIGKILL.
KILL_GRACE: Final = 5.0
SECONDS = finite_number("seconds", allow_zero=True)
POSITIVE_SECONDS = finite_number("seconds", allow_zero=False)

# Runs beside the watcher in a session of its own: it learns the process group of each
# delivery command on stdin ("+PGID" from the command, "-PGID" from the watcher) and, when
# stdin ends because the watcher died (SIGKILL, OOM), kills the groups still listed.
_WATCHDOG: Final = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    sign, pgid = line[:1], int(line[1:])
    (groups.add if sign == "+" else groups.discard)(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
_PR_SET_PDEATHSIG: Final = 1


def _load_prctl() -> Any:
    """libc's prctl, looked up in the watcher (a forked child of a threaded process should not
    dlopen anything); None off Linux."""
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl: Final = _load_prctl()


def _in_the_handler_before_exec(watchdog_fd: int | None, parent: int) -> None:
    """Runs in the forked delivery command before it execs (its own session already).

    It tells the watchdog its process group first, so no window is left in which the watcher
    could die with the group unknown; then (Linux) it asks for SIGKILL when the watcher dies,
    and checks the watcher did not die already.
    """
    if watchdog_fd is not None:
        with suppress(OSError):
            os.write(watchdog_fd, f"+{os.getpid()}\n".encode())
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class _Watchdog:
    """Kills the process groups of delivery commands when the watcher dies without doing it.

    A parent-death signal only reaches the watcher's direct child (the shell), and only on
    Linux; the commands the shell starts live on in its process group, which the watchdog kills
    as soon as its stdin (a pipe from the watcher) ends. Each command announces its group to
    the watchdog itself, before it execs; the watcher says when a group is done.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def fd(self) -> int | None:
        """The watchdog's stdin, started when needed; None when it cannot run."""
        process = self._process
        if process is None or process.poll() is not None:
            try:
                process = self._process = subprocess.Popen(
                    [sys.executable, "-I", "-c", _WATCHDOG],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    # Its own session: a kill of the watcher's group must not take it along.
                    # It exits by itself when its stdin ends.
                    start_new_session=True,
                )
            except OSError:
                logger.warning("cannot start the handler watchdog", exc_info=True)
                return None
        assert process.stdin is not None
        return process.stdin.fileno()

    def forget(self, pgid: int) -> None:
        fd = self.fd()
        if fd is not None:
            with suppress(OSError):
                os.write(fd, f"-{pgid}\n".encode())

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with suppress(OSError):
                process.stdin.close()
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=KILL_GRACE)


def handler_environment(row: Mapping[str, Any], profile_name: str | None) -> dict[str, str]:
    """The variables a delivery command gets besides the watcher's own environment."""
    attempt = row.get("handoff_attempt")
    return {
        "HERMES_SESSION_ID": str(row["id"]),
        "HERMES_HANDOFF_PLATFORM": str(row.get("handoff_platform") or ""),
        "HERMES_HANDOFF_ATTEMPT": "" if attempt is None else str(attempt),
        "HERMES_HANDOFF_OWNER": str(row.get("handoff_owner") or ""),
        "HERMES_PROFILE": profile_name or "",
    }


class ExecHandler:
    """Delivers a handoff by running ``command`` through the shell.

    stdin: the row as claimed plus ``messages`` (its transcript), as one JSON document; the
    environment: :func:`handler_environment`. Exit 0 completes the handoff; anything else fails
    it with the last non-empty line of the command's stderr (or "exit N"); every line the
    command prints is logged at INFO, prefixed with the session id. The command runs in its
    own process group: after ``timeout`` seconds, or when the delivery is cancelled (a drain
    that timed out), the group gets SIGTERM, then SIGKILL after ``kill_grace`` seconds; if the
    watcher dies, the group is killed by a parent-death signal (Linux) and by the watchdog.
    """

    def __init__(
        self, command: str, *, timeout: float = DEFAULT_EXEC_TIMEOUT, kill_grace: float = KILL_GRACE
    ) -> None:
        self.command = command
        self.timeout = timeout
        self.kill_grace = kill_grace
        self._watchdog = _Watchdog()

    def __repr__(self) -> str:
        return f"ExecHandler({self.command!r}, timeout={self.timeout:g})"

    def close(self) -> None:
        """Stop the watchdog (once no delivery runs)."""
        self._watchdog.close()

    async def __call__(self, row: Mapping[str, Any], profile_name: str | None) -> None:
        session_id = str(row["id"])
        process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **handler_environment(row, profile_name)},
            start_new_session=True,
            preexec_fn=functools.partial(
                _in_the_handler_before_exec, self._watchdog.fd(), os.getpid()
            ),
        )
        stderr_tail: deque[str] = deque(maxlen=200)
        payload = json.dumps(dict(row), default=str).encode()
        io = asyncio.gather(
            _feed(process, payload),
            _relay(process.stdout, session_id, logging.INFO, None),
            # Progress as much as trouble: stderr is logged at INFO, and a failure's one line
            # (below) at WARNING by the watcher.
            _relay(process.stderr, session_id, logging.INFO, stderr_tail),
        )
        try:
            async with asyncio.timeout(self.timeout):
                await io
                await process.wait()
        except TimeoutError:
            await self._stop(process, io)
            raise DeliveryFailed(
                f"the delivery command timed out after {self.timeout:g} s and was killed"
            ) from None
        except BaseException:
            await self._stop(process, io)
            raise
        finally:
            self._watchdog.forget(process.pid)
        if process.returncode != 0:
            raise DeliveryFailed(_last_line(stderr_tail) or f"exit {process.returncode}")

    async def _stop(self, process: asyncio.subprocess.Process, io: asyncio.Future[Any]) -> None:
        """SIGTERM the command's group, SIGKILL it after the grace period; reap the command."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with suppress(TimeoutError):
            async with asyncio.timeout(self.kill_grace):
                await asyncio.shield(process.wait())
        # The shell may be gone while what it started lingers in the group: kill the group.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        io.cancel()
        await asyncio.gather(io, return_exceptions=True)


def _last_line(lines: deque[str]) -> str:
    """What a failed command's stderr tells the user: its last non-empty line, bounded (the
    lines before it are progress, which the log keeps)."""
    said = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return said[:STDERR_TAIL]


async def _feed(process: asyncio.subprocess.Process, payload: bytes) -> None:
    """Write the document to the command's stdin and close it; a command that does not read
    it is not an error."""
    stdin = process.stdin
    if stdin is None:
        return
    try:
        stdin.write(payload)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stdin.close()


async def _relay(
    stream: asyncio.StreamReader | None,
    session_id: str,
    level: int,
    tail: deque[str] | None,
) -> None:
    """Log each line of the command's output as ``[session_id] line``; keep stderr's tail."""
    if stream is None:
        return
    while line := await stream.readline():
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        logger.log(level, "[%s] %s", session_id, text)
        if tail is not None:
            tail.append(text)


def load_handler(spec: str) -> Any:
    """``package.module:function`` -> the function (async or sync, taking row and profile)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInputError(f"--handler must look like package.module:function, not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {module_name!r} for --handler: {exc}") from None
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise InvalidInputError(f"{module_name} has no callable {attribute!r} for --handler")
    if inspect.iscoroutinefunction(handler):
        return handler

    async def in_thread(row: Mapping[str, Any], profile_name: str | None) -> Any:
        return await asyncio.to_thread(handler, row, profile_name)

    return in_thread


def _profile(text: str) -> tuple[str, Path]:
    name, sep, home = text.partition("=")
    if not sep or not name.strip() or not home.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=HOME, not {text!r}")
    return name.strip(), Path(home.strip()).expanduser()


def register(commands: Any) -> None:
    configure_watch(commands)


def configure_watch(commands: Any) -> None:
    watch = command(
        commands,
        "watch",
        run_watch,
        help="run a handoff watcher (a gateway)",
        description="Claim pending handoffs and deliver each one, until SIGINT or SIGTERM; "
        "then stop claiming, wait for deliveries in flight (--drain-timeout) and exit.",
    )
    add_option(
        watch,
        "--exec",
        env="HERMES_STATE_WATCH_EXEC",
        metavar="CMD",
        help="deliver by running CMD through the shell: the row as claimed and its messages "
        "as JSON on stdin, HERMES_SESSION_ID, HERMES_HANDOFF_PLATFORM, HERMES_HANDOFF_ATTEMPT, "
        "HERMES_HANDOFF_OWNER and HERMES_PROFILE in its environment; exit 0 completes",
    )
    add_option(
        watch,
        "--exec-timeout",
        env="HERMES_STATE_EXEC_TIMEOUT",
        kind=POSITIVE_SECONDS,
        default=DEFAULT_EXEC_TIMEOUT,
        metavar="S",
        help="kill a --exec command running longer than S seconds and fail its handoff "
        f"(above 0 up to {MAX_SECONDS:g}; default {DEFAULT_EXEC_TIMEOUT:g})",
    )
    add_option(
        watch,
        "--handler",
        env="HERMES_STATE_WATCH_HANDLER",
        metavar="MODULE:FUNC",
        help="deliver by calling FUNC(row, profile_name), async or sync; row is the same "
        "document --exec gets on stdin",
    )
    add_option(
        watch,
        "--interval",
        env="HERMES_STATE_WATCH_INTERVAL",
        kind=POSITIVE_SECONDS,
        default=2.0,
        metavar="S",
        help=f"seconds between polls (more than 0, up to {MAX_SECONDS:g}; default 2)",
    )
    add_option(
        watch,
        "--drain-timeout",
        env="HERMES_STATE_DRAIN_TIMEOUT",
        kind=SECONDS,
        default=30.0,
        metavar="S",
        help=f"on stop, seconds to wait for deliveries in flight (0 up to {MAX_SECONDS:g}; "
        "default 30)",
    )
    add_option(
        watch,
        "--profile",
        env="HERMES_STATE_WATCH_PROFILES",
        kind=_profile,
        repeatable=True,
        metavar="NAME=HOME",
        help="also serve this profile's HOME/state.db (repeatable; env: comma-separated)",
    )
    add_option(
        watch,
        "--owner",
        env="HERMES_STATE_OWNER",
        metavar="NAME",
        help="this gateway's identity, stamped on its claims; keep it stable across restarts "
        "so a restarted gateway recognises its own dead claims (default: HOSTNAME:HERMES_HOME)",
    )
    add_option(
        watch,
        "--lease-seconds",
        env="HERMES_STATE_LEASE_SECONDS",
        kind=POSITIVE_SECONDS,
        default=60.0,
        metavar="S",
        help="how long a claim holds without renewal (renewed every third); another gateway "
        f"fails a row whose lease expired (above 0 up to {MAX_SECONDS:g}; default 60)",
    )
    add_option(
        watch,
        "--max-concurrency",
        env="HERMES_STATE_MAX_CONCURRENCY",
        kind=whole_number(1, 1000),
        default=3,
        metavar="N",
        help="deliveries in flight at once; the rest stay pending for other gateways "
        "(1 up to 1000; default 3)",
    )
    add_option(
        watch,
        "--log-format",
        env="HERMES_STATE_LOG_FORMAT",
        kind=_log_format,
        default="text",
        metavar="FORMAT",
        help="text (default), or json: one JSON object per line for log shippers",
    )
    add_option(
        watch,
        "--once",
        env="HERMES_STATE_WATCH_ONCE",
        flag=True,
        help="poll once, wait for the deliveries, and exit",
    )
    add_option(
        watch,
        "--metrics-port",
        env="HERMES_STATE_WATCH_METRICS_PORT",
        kind=whole_number(1, 65535),
        metavar="PORT",
        help="serve Prometheus metrics (claims, deliveries, latencies) on 127.0.0.1:PORT/metrics "
        "(1 up to 65535); needs the dashboard extra",
    )


def _watcher_metrics(port: int | None) -> Any:
    """The watcher's metrics, served on ``port``, or None when metrics are off."""
    if port is None:
        return None
    try:
        from ..metrics import WatcherMetrics
    except ImportError:
        raise InvalidInputError(
            "--metrics-port needs prometheus-client: run `pip install 'hermes-state[dashboard]'`"
        ) from None
    metrics = WatcherMetrics()
    try:
        metrics.serve(port)
    except OSError as exc:
        message = f"cannot serve metrics on 127.0.0.1:{port}: {exc.strerror}"
        raise HermesStateError(message) from None
    logger.info("metrics on http://127.0.0.1:%d/metrics", port)
    return metrics


def run_watch(args: argparse.Namespace, out: Output) -> Result:
    from ..store import SessionDB
    from ..watcher import GatewayRunner, default_owner

    if bool(args.exec) == bool(args.handler):
        raise InvalidInputError("watch needs exactly one of --exec CMD or --handler MODULE:FUNC")
    if args.log_format == "json":
        for log_handler in logging.getLogger().handlers:
            log_handler.setFormatter(JsonLogFormatter())
    handler = (
        ExecHandler(args.exec, timeout=args.exec_timeout)
        if args.exec
        else load_handler(args.handler)
    )
    metrics = _watcher_metrics(args.metrics_port)
    store = SessionDB(
        url=existing_url(args),
        owner=args.owner or default_owner(),
        lease_seconds=args.lease_seconds,
    )
    runner = GatewayRunner(
        store,
        handler,
        profiles=repeated(args, "profile"),
        interval=args.interval,
        drain_timeout=args.drain_timeout,
        max_concurrency=args.max_concurrency,
        metrics=metrics,
    )
    logger.info(
        "watching %s every %gs as %s (lease %gs, up to %d at once) with %r",
        store.where,
        args.interval,
        store.owner,
        args.lease_seconds,
        args.max_concurrency,
        handler,
    )

    try:
        asyncio.run(runner.serve(ticks=1 if args.once else None))
    finally:
        if isinstance(handler, ExecHandler):
            handler.close()
    logger.info("watcher stopped")
    return Result({"stopped": True, "owner": store.owner, "database": store.where})


def _log_format(text: str) -> str:
    if text not in ("text", "json"):
        raise argparse.ArgumentTypeError(f"expected text or json, not {text!r}")
    return text


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: time (epoch seconds), level, logger, message, and the
    exception's text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)
