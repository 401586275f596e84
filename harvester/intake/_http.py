"""The HTTP layer of the receiver: the request handler (routes, errors in the OTLP shape the client
asked for) and the threading server that bounds its connections."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import orjson

from ._otlp import JSON, PROTOBUF, RPC_CODES, BadRequest, ClientGone, status_protobuf

if TYPE_CHECKING:
    from ._receiver import Receiver

__all__ = ["HEALTH_PATH", "TRACES_PATH", "Server"]

TRACES_PATH = "/v1/traces"
HEALTH_PATH = "/healthz"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse one connection
    timeout = 30  # seconds a stalled client may hold its thread
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the flush lines; /healthz has the counts

    def _send(self, status: int, body: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()) -> None:
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
        path = self.path.split("?", 1)[0]
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        protobuf = ctype == PROTOBUF
        try:
            if path == HEALTH_PATH:
                if method != "GET":
                    raise BadRequest(405, f"{method} not allowed on {path}; use GET")
                self._send(200, orjson.dumps(receiver.health()), JSON)
            elif path == TRACES_PATH:
                if method != "POST":
                    raise BadRequest(405, f"{method} not allowed on {path}; use POST")
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


_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Server(ThreadingHTTPServer):
    """One thread per connection (exporters keep theirs open), at most ``max_connections`` of them."""

    daemon_threads = True
    request_queue_size = 128  # many exporters may connect at once
    receiver: Receiver

    def __init__(self, address: tuple[str, int], max_connections: int) -> None:
        super().__init__(address, _Handler)
        self.max_connections = max_connections
        self.connections = 0  # changed by the accept thread and decremented by handlers, under the lock
        self._lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            admitted = self.connections < self.max_connections
            self.connections += admitted
        if not admitted:
            # Over capacity: a retryable 503 (OTLP exporters back off and resend), not a new thread.
            self.receiver.count_error("503")
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self.connections -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a reset connection is the client's problem, not a traceback on our stderr
