"""The receiver's connection slots: bounded in all and per client address, proven connections first.

A connection is *proven* once it has sent the whole headers of a request that passed the token check
(any whole headers when no token is set). Until then it costs the client nothing to hold: a client
trickling headers, or sending none, keeps its slot until the header deadline, and a client that
reconnects as soon as it is dropped keeps every slot of its address for as long as it likes. So the
two kinds have slots of their own, each ``max_connections`` in all and ``max_client_connections`` per
address: a newcomer always gets an unproven slot, taking the oldest one's when they are full (that
connection is closed), and a connection that proves itself moves to a proven slot, or is answered 503
when they are full. Real exporters send their headers at once, within a moment of connecting, and
keep their connection open; a trickler can only ever displace another unproven connection.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter

__all__ = ["Slots"]


class Slots:
    """Who holds a connection slot; each method takes the lock, never waits on a socket."""

    def __init__(self, max_connections: int, max_client_connections: int) -> None:
        self.max_connections = max_connections
        self.max_client_connections = max_client_connections
        self._lock = threading.Lock()
        self._unproven: dict[socket.socket, str] = {}  # oldest first
        self._proven: dict[socket.socket, str] = {}
        self._unproven_by: Counter[str] = Counter()
        self._proven_by: Counter[str] = Counter()

    @property
    def connections(self) -> int:
        return len(self._unproven) + len(self._proven)

    def admit(self, sock: socket.socket, client: str) -> bool:
        """Give ``sock`` an unproven slot, closing the oldest unproven connection (of its address when
        the address has its share, else of any) if there is none free; True if one was closed."""
        with self._lock:
            victim: socket.socket | None = None
            if self._unproven_by[client] >= self.max_client_connections:
                victim = next(s for s, c in self._unproven.items() if c == client)
            elif len(self._unproven) >= self.max_connections:
                victim = next(iter(self._unproven))
            if victim is not None:
                self._take(victim)
            self._unproven[sock] = client
            self._unproven_by[client] += 1
        if victim is None:
            return False
        try:  # its thread's read ends at once, and the thread ends with it
            victim.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def prove(self, sock: socket.socket) -> bool:
        """``sock`` sent a request the token admits: a proven slot, or False when they are all taken
        (in all or by its address) or the connection was closed for a newcomer meanwhile."""
        with self._lock:
            if sock in self._proven:
                return True
            client = self._unproven.get(sock)
            if client is None:
                return False
            if len(self._proven) >= self.max_connections or self._proven_by[client] >= self.max_client_connections:
                return False
            self._take(sock)
            self._proven[sock] = client
            self._proven_by[client] += 1
            return True

    def release(self, sock: socket.socket) -> None:
        """The connection's thread is done with it (a connection closed for a newcomer already was)."""
        with self._lock:
            self._take(sock)

    def _take(self, sock: socket.socket) -> None:
        for held, by in ((self._unproven, self._unproven_by), (self._proven, self._proven_by)):
            client = held.pop(sock, None)
            if client is not None:
                by[client] -= 1
                if not by[client]:
                    del by[client]
