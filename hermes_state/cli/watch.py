"""``hermes-state watch``: a handoff watcher delivering with a shell command or a function."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import os
import signal
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

from ..errors import HermesStateError, InvalidInputError
from . import (
    MAX_SECONDS,
    Output,
    Result,
    add_option,
    command,
    database_url,
    finite_number,
    repeated,
    whole_number,
)

logger = logging.getLogger("hermes_state.watch")

STDERR_TAIL: Final = 400
SECONDS = finite_number("seconds", allow_zero=True)
POSITIVE_SECONDS = finite_number(
    "seconds", allow_zero=False
)  # characters of a failed command's stderr kept as the handoff error


class DeliveryFailed(HermesStateError):
    """The delivery command exited with a non-zero status."""


class ExecHandler:
    """Delivers a handoff by running ``command`` through the shell.

    The row goes to the command's stdin as JSON, with ``HERMES_SESSION_ID``,
    ``HERMES_HANDOFF_PLATFORM`` and ``HERMES_PROFILE`` in its environment. Exit 0 completes the
    handoff; anything else fails it with the tail of the command's stderr (or "exit N"). The
    command runs in its own process group, which is killed if the delivery is cancelled.
    """

    def __init__(self, command: str) -> None:
        self.command = command

    def __repr__(self) -> str:
        return f"ExecHandler({self.command!r})"

    async def __call__(self, row: Mapping[str, Any], profile_name: str | None) -> None:
        environment = {
            **os.environ,
            "HERMES_SESSION_ID": str(row["id"]),
            "HERMES_HANDOFF_PLATFORM": str(row.get("handoff_platform") or ""),
            "HERMES_PROFILE": profile_name or "",
        }
        process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            start_new_session=True,
        )
        payload = json.dumps(dict(row), default=str).encode()
        try:
            _, stderr = await process.communicate(payload)
        except asyncio.CancelledError:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise
        if process.returncode != 0:
            tail = stderr.decode("utf-8", "replace").strip()[-STDERR_TAIL:]
            raise DeliveryFailed(tail or f"exit {process.returncode}")


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
        help="deliver by running CMD through the shell (row as JSON on stdin)",
    )
    add_option(
        watch,
        "--handler",
        env="HERMES_STATE_WATCH_HANDLER",
        metavar="MODULE:FUNC",
        help="deliver by calling FUNC(row, profile_name), async or sync",
    )
    add_option(
        watch,
        "--interval",
        env="HERMES_STATE_WATCH_INTERVAL",
        kind=SECONDS,
        default=2.0,
        metavar="S",
        help=f"seconds between polls (0 up to {MAX_SECONDS:g}; default 2)",
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
    from gateway.run import GatewayRunner, default_owner

    from ..store import SessionDB

    if bool(args.exec) == bool(args.handler):
        raise InvalidInputError("watch needs exactly one of --exec CMD or --handler MODULE:FUNC")
    handler = ExecHandler(args.exec) if args.exec else load_handler(args.handler)
    metrics = _watcher_metrics(args.metrics_port)
    store = SessionDB(
        url=database_url(args),
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

    asyncio.run(runner.serve(ticks=1 if args.once else None))
    logger.info("watcher stopped")
    return Result({"stopped": True, "owner": store.owner, "database": store.where})
