"""``hermes-state dashboard``: serve the operator's web page, JSON API, live events and metrics."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import socket
from typing import Any, Final

from ..errors import HermesStateError, InvalidInputError
from .common import (
    Output,
    Result,
    add_option,
    command,
    open_store,
    whole_number,
)

logger = logging.getLogger("hermes_state.dashboard")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
#: Seconds a stopping server waits for requests in flight.
GRACE: Final = 5


def register(commands: Any) -> None:
    configure_dashboard(commands)


def configure_dashboard(commands: Any) -> None:
    dashboard = command(
        commands,
        "dashboard",
        run_dashboard,
        help="serve a web dashboard of the handoffs (needs the dashboard extra)",
        description="Serve the handoffs live: counts, running rows and leases, failures, each "
        "session's history and transcript, a JSON API under /api/, Server-Sent Events at "
        "/events and Prometheus metrics at /metrics. Without --token it is read-only.",
    )
    add_option(
        dashboard,
        "--host",
        env="HERMES_STATE_DASHBOARD_HOST",
        default=DEFAULT_HOST,
        metavar="ADDR",
        help=f"address to listen on (default {DEFAULT_HOST}; a non-loopback address needs --token)",
    )
    add_option(
        dashboard,
        "--port",
        env="HERMES_STATE_DASHBOARD_PORT",
        kind=whole_number(0, 65535),
        default=DEFAULT_PORT,
        metavar="PORT",
        help=f"TCP port (0 up to 65535; default {DEFAULT_PORT}; 0 picks a free one)",
    )
    add_option(
        dashboard,
        "--token",
        env="HERMES_STATE_DASHBOARD_TOKEN",
        metavar="TOKEN",
        help="enables the actions (retry, withdraw, reclaim), sent as `Authorization: Bearer "
        "TOKEN`; prefer the environment variable, which other users cannot see",
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run_dashboard(args: argparse.Namespace, out: Output) -> Result:
    from ..dashboard import require_extra

    token = (args.token or "").strip() or None
    if not token and not is_loopback(args.host):
        raise InvalidInputError(
            f"refusing to serve on {args.host} without a token: anyone who can reach it could "
            "read every session; set --token (or HERMES_STATE_DASHBOARD_TOKEN), or bind 127.0.0.1"
        )
    require_extra()
    import uvicorn

    from ..dashboard.app import ACTOR, LOOPBACK_NAMES, create_app
    from ..threaded import AsyncSessionDB

    listener = _listen(args.host, args.port)
    # Without a token the dashboard only reads: read-only, nothing created or migrated (a file
    # not at head is read through the lens). With one, its actions write rows, on a database
    # that exists and is at head.
    store = open_store(args, read_only=not token, actor=ACTOR)
    try:
        # On loopback, answer only to loopback names (DNS rebinding); elsewhere any name.
        allowed = LOOPBACK_NAMES if is_loopback(args.host) else None
        app = create_app(
            AsyncSessionDB(store), token=token, where=store.where, allowed_hosts=allowed
        )
        mode = "actions enabled" if token else "read-only"
        logger.info("dashboard of %s (%s)", store.where, mode)
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACE
        )
        server = uvicorn.Server(config)
        address = _address(listener)
        _announce(server, address, out)
        stopping = server.handle_exit

        def handle_exit(*signal_info: Any) -> None:
            stopping(*signal_info)
            app.state.dashboard.feed.close_streams_threadsafe()

        server.handle_exit = handle_exit  # type: ignore[method-assign,assignment]
        # Once it has shut down, uvicorn raises the signal it caught again, for the handler it
        # found: SIGTERM's default would end the process before the store below is closed (and
        # SQLite's -wal and -shm would stay behind). The handler it finds here does nothing,
        # so the command goes on to close the store and ends with 0.
        previous = signal.signal(signal.SIGTERM, _stopped_by_uvicorn)
        try:
            server.run(sockets=[listener])
        except SystemExit:  # uvicorn's way of saying the app's startup failed
            server.started = False
        finally:
            signal.signal(signal.SIGTERM, previous)
        if not server.started:
            raise HermesStateError("the dashboard could not start (see the error above)")
    finally:
        listener.close()
        store.close()
    return Result(
        {"stopped": True, "address": address, "database": store.where, "actions": bool(token)}
    )


def _stopped_by_uvicorn(_signal: int, _frame: object) -> None:
    """SIGTERM, raised again by uvicorn after its graceful shutdown: nothing more to do."""


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line error saying what to change."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidInputError(f"--host {host!r} is not an address here: {exc.strerror}") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise HermesStateError(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port"
        ) from None
    return listener


def _address(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def _announce(server: Any, address: str, out: Output) -> None:
    """Print the address once the server is ready (a port of 0 was chosen by the system): on
    stdout for people, on stderr under --json, whose stdout holds only the final document."""
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets=sockets)
        if server.started:
            stream = out.stderr if out.as_json else out.stdout
            print(f"dashboard on {address}", file=stream, flush=True)

    server.startup = startup
