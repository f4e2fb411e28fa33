"""A loopback TCP relay that a test can cut and restore, to stage a database outage.

``TcpProxy(target_port)`` listens on a free loopback port and relays every connection to
``127.0.0.1:target_port``. ``cut()`` closes the listening socket and every relayed
connection at once: the port refuses connections, as a dead server's would, and clients
holding a connection see it reset. ``restore()`` listens on the same port again. Everything
runs on daemon threads and stops with ``close()`` (or the ``with`` block), so nothing outlives
the test.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from types import TracebackType

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._pairs: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._closed = False
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        self.restore()

    # -- the switch ---------------------------------------------------------------------------

    def restore(self) -> None:
        """Listen (again) on :attr:`port`."""
        with self._lock:
            if self._listener is not None or self._closed:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and reset the relayed ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in pairs:
            with contextlib.suppress(OSError):
                # RST rather than FIN: the client learns at once that the peer is gone.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self.cut()
        self._closed = True

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- the relay ----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._pairs.update((client, upstream))
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        peers = {client: upstream, upstream: client}
        try:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            while True:
                for key, _events in selector.select(timeout=0.5):
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    data = source.recv(65536)
                    if not data:
                        return
                    peers[source].sendall(data)
                with self._lock:
                    if client not in self._pairs:
                        return
        except (OSError, ValueError):
            return
        finally:
            selector.close()
            with self._lock:
                self._pairs.discard(client)
                self._pairs.discard(upstream)
            for sock in peers:
                with contextlib.suppress(OSError):
                    sock.close()
