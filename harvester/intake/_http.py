"""The HTTP layer of the receiver: the request handler (routes, errors in the OTLP shape the client
asked for, deadlines on reading a request) and the threading server that bounds its connections
(``Slots``: in all and per client address, proven connections first).

A thread per connection is cheap until a client holds it by sending slowly: a socket timeout is per
``recv``, so a byte every few seconds would keep it forever. Reads therefore go through a clock that
bounds the whole of a request's headers (a connection's first request from the moment it is accepted,
a keep-alive request from its first byte) and, once the receiver starts reading its body, the whole body.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import orjson

from ._otlp import JSON, PROTOBUF, RPC_CODES, BadRequest, ClientGone, status_protobuf
from ._slots import Slots

if TYPE_CHECKING:
    from ._receiver import Receiver

__all__ = ["HEALTH_PATH", "TRACES_PATH", "Server"]

TRACES_PATH = "/v1/traces"
HEALTH_PATH = "/healthz"
RATE_GRACE_S = 5.0  # seconds a body may take before the minimum rate applies: a small one never meets it


class _Deadline(io.RawIOBase):
    """A connection's socket read under a deadline for the whole of what is being read, not per ``recv``.

    Between requests it waits ``idle`` seconds per read (a keep-alive connection may be quiet that
    long); ``expect(seconds)`` starts a deadline at the next byte that arrives (a request's first),
    ``start(seconds, min_rate)`` starts one now. Past it a read raises ``TimeoutError``. With a
    ``min_rate`` (bytes a second), a body must also keep up with it after ``RATE_GRACE_S``: a client
    that trickles a large declared body holds its share of the budget for seconds, not the whole deadline.
    """

    def __init__(self, sock: socket.socket, idle: float) -> None:
        super().__init__()
        self._sock = sock
        self._idle = idle
        self._deadline: float | None = None
        self._pending: float | None = None  # seconds of the deadline that starts at the next byte
        self._started = 0.0
        self._rate = 0.0
        self._read = 0  # bytes read since start()
        self.expired = False
        self.ended = False  # the client closed its side (or its slot was given to a newcomer)

    def readable(self) -> bool:
        return True

    def expect(self, seconds: float) -> None:
        self._deadline, self._pending, self._rate, self.expired = None, seconds, 0.0, False

    def start(self, seconds: float, min_rate: float = 0.0) -> None:
        self._started = time.monotonic()
        self._deadline, self._pending, self._rate, self._read = self._started + seconds, None, min_rate, 0

    def stop(self) -> None:
        """No deadline (the response is being written): the socket waits ``idle`` again."""
        self._deadline = self._pending = None
        self._rate = 0.0
        self.expired = False
        self._sock.settimeout(self._idle)

    def _left(self) -> float:
        assert self._deadline is not None
        left = self._deadline - time.monotonic()
        if self._rate:  # the time until what was read falls behind the minimum rate
            left = min(left, self._started + RATE_GRACE_S + self._read / self._rate - time.monotonic())
        return left

    def readinto(self, buffer: Any) -> int:
        if self._deadline is None:
            self._sock.settimeout(self._idle)
        else:
            left = self._left()
            if left <= 0:
                self.expired = True
                raise TimeoutError("deadline passed")
            self._sock.settimeout(left)
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self.expired = self._deadline is not None
            raise
        self._read += n
        self.ended = not n
        if n and self._pending is not None:
            self.start(self._pending)
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse one connection
    timeout = 30  # seconds an idle keep-alive connection may hold its thread between requests
    server: Server
    clock: _Deadline
    fresh = True  # no request read yet on this connection

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the flush lines; /healthz has the counts

    def setup(self) -> None:
        super().setup()
        self.clock = _Deadline(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.clock, 1 << 16)

    def handle_one_request(self) -> None:
        if self.fresh:  # due from the accept: a client that sends nothing holds its slot no longer
            self.fresh = False
            self.clock.start(self.server.receiver.header_timeout)
        else:  # a keep-alive connection may be quiet between requests: due from the first byte
            self.clock.expect(self.server.receiver.header_timeout)
        super().handle_one_request()  # a TimeoutError while reading headers closes the connection
        if self.clock.expired:  # its headers were late (a late body is answered, a 408, and reset)
            self.server.receiver.count_error("header_timeout")

    def _send(self, status: int, body: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.clock.stop()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, protobuf: bool) -> None:
        code = RPC_CODES.get(status, 2)
        if protobuf:
            body, ctype = status_protobuf(code, message), PROTOBUF
        else:
            body, ctype = orjson.dumps({"code": code, "message": message}), JSON
        headers = {401: [("WWW-Authenticate", "Bearer")], 503: [("Retry-After", "1")]}.get(status, [])
        self._send(status, body, ctype, headers)

    def _dispatch(self, method: str) -> None:
        receiver = self.server.receiver
        if self.clock.ended:  # the headers were cut short: no request to answer
            self.close_connection = True
            return
        path = self.path.split("?", 1)[0]
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        protobuf = ctype == PROTOBUF
        try:
            receiver.authorize(self.headers)  # before a body is read or any budget is taken
            if not self.server.slots.prove(self.connection):
                raise BadRequest(503, "too many connections from this address or in all; retry shortly")
            if path == HEALTH_PATH:
                if method != "GET":
                    raise BadRequest(405, f"{method} not allowed on {path}; use GET")
                health = receiver.health()
                self._send(200 if health["status"] == "ok" else 503, orjson.dumps(health), JSON)
            elif path == TRACES_PATH:
                if method != "POST":
                    raise BadRequest(405, f"{method} not allowed on {path}; use POST")
                self.clock.start(receiver.body_timeout, receiver.min_body_rate)
                self._send(200, receiver.handle_export(self.headers, self.rfile, ctype), ctype)
            else:
                raise BadRequest(404, f"no such path {path}; send traces to {TRACES_PATH}")
        except BadRequest as exc:
            # The body may be unread: the connection cannot be reused safely.
            self.close_connection = True
            receiver.count_error(exc.status)
            self._error(exc.status, exc.message, protobuf)
        except ClientGone:
            self.close_connection = True
            receiver.count_error("aborted")
        except Exception as exc:
            self.close_connection = True
            receiver.count_error(500)
            try:
                self._error(500, f"internal error: {type(exc).__name__}", protobuf)
            except OSError:
                pass

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def _other(self) -> None:
        self._dispatch(self.command)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _other


class Server(ThreadingHTTPServer):
    """One thread per connection (exporters keep theirs open), in the slots ``Slots`` hands out:
    a connection that has not sent a whole request with the token yields its slot to a newcomer."""

    daemon_threads = True
    request_queue_size = 128  # many exporters may connect at once
    receiver: Receiver

    def __init__(self, address: tuple[str, int], max_connections: int, max_client_connections: int) -> None:
        super().__init__(address, _Handler)
        self.slots = Slots(max_connections, max_client_connections)

    @property
    def connections(self) -> int:
        return self.slots.connections

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.slots.admit(request, client_address[0]):
            self.receiver.count_error("evicted")
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a reset connection is the client's problem, not a traceback on our stderr
