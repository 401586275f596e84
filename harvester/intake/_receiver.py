"""An OTLP/HTTP trace receiver, so agents on other machines (or a Collector) can feed harvester.

Spans arrive over the network in pieces: one trace may come in several requests, out of order and
retried. They are held per trace until the run is complete (its agent span has arrived and the trace
has been quiet for ``idle_seconds``), then handed to the same post-grouping pipeline the in-process
``HarvestingSpanProcessor`` uses, so a run is sampled, redacted and stored identically whichever way
it came in.

Everything a client sends is untrusted: the token is checked before any body is read, headers and bodies
are read under deadlines (a client trickling bytes cannot hold a connection), the bytes held by all
bodies together are bounded as they are read and inflated (gzip bombs included), connections are bounded
in all and per client address (one that has not sent a whole request with the token yields its slot to a
newcomer), request framing that two parsers could read two ways is refused, open traces are bounded in
count and spans (the least recently active go first, counted), a broken request never takes the server
down, and the listener binds loopback unless told otherwise. A trace that completes again (an exporter
retrying a request after its trace was written) is merged with what is stored of it, never stored as
part of itself. A 200 means durable: each body is in the write-ahead ``Spool`` on disk before it is
answered (``harvester serve``: beside the store), replayed at the next start if a crash came first.

The stdlib HTTP server is enough: exporters send batches (hundreds of spans a request), so
per-request overhead is small next to decoding, which walks the protobuf message directly.
"""

from __future__ import annotations

import hmac
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ReceiverError
from ..redact import Redactor
from ..spans import OtlpStats, SpanData
from ..store import TraceStore
from ._assembly import IdleAssembler
from ._handover import Handovers
from ._http import HEALTH_PATH, TRACES_PATH, Server
from ._otlp import (
    JSON,
    PROTOBUF,
    BadRequest,
    ClientGone,
    body_length,
    decode_json,
    decode_protobuf,
    decompress,
    export_response,
    read_body,
    read_chunked,
)
from ._pipeline import RunWriter
from ._spool import Spool, spool_folder
from ._store_process import StoreProcess
from ._workers import can_share

__all__ = ["HEALTH_PATH", "Receiver", "TRACES_PATH"]

_JSON_RECORD = 1  # a spool record's kind: OTLP/JSON (0: protobuf)


class Receiver:
    """``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON) into the trace store; ``GET /healthz``.

    ``store`` is a path, a ``TraceStore``, or a ``RunWriter`` shared with other producers; runs go
    through ``RunWriter`` (sampling at ``sample_rate``, ``redact``, batched writes) like the in-process
    processor's, and, as there, a trace sampled in is stored whole (redacted) and read into runs at the
    store's first read (``traces_written`` in ``/healthz``): reading runs costs more than receiving them.
    ``start()`` serves on a background thread and returns the bound port (``port=0``: any free one);
    ``stop()`` stops listening, completes every open trace that has its agent span and writes them.
    ``on_flush`` is called with the number of traces each sweep completed (the CLI prints it).

    Limits (docs/collector.md): a request's headers must arrive within ``header_timeout`` of its first byte
    (a connection's first request: of its accept) and its body within ``body_timeout`` of its headers,
    arriving at ``min_body_rate`` bytes a second or faster after its first 5 seconds (408); bodies in
    flight hold at most ``max_inflight_bytes`` together, counted as read and as inflated (503); one body
    at most ``max_body_bytes`` on the wire and ``max_decoded_bytes`` inflated (413); at most
    ``max_connections`` connections, ``max_client_connections`` from one address (503), and as many
    again not yet proven (no whole request with the token yet), the oldest closed for a newcomer. With a
    ``token``, every path needs it, ``/healthz`` included.

    ``store_process``: store (sample, redact, write) in a child process (``StoreProcess``), so that
    receiving and storing use two cores; ``harvester serve`` does. Needs a store path, not an object.

    ``spool``: the folder of the write-ahead spool (``Spool``); with a store process it defaults to one
    beside the store (``spool_folder``). Over ``max_spool_bytes`` of spooled bodies not yet stored, 503.
    """

    def __init__(
        self,
        store: RunWriter | TraceStore | str | os.PathLike[str] | None = None,
        *,
        sample_rate: float = 1.0,
        redact: Any = True,
        host: str = "127.0.0.1",
        port: int = 4318,
        idle_seconds: float = 2.0,
        orphan_seconds: float = 60.0,
        max_body_bytes: int = 16 << 20,
        token: str | None = None,
        max_open_traces: int = 10_000,
        max_open_spans: int = 200_000,
        max_open_bytes: int = 256 << 20,
        max_connections: int = 128,
        max_client_connections: int = 32,
        max_inflight_bytes: int | None = None,
        max_decoded_bytes: int | None = None,
        header_timeout: float = 5.0,
        body_timeout: float = 60.0,
        min_body_rate: float = 64 << 10,
        on_flush: Callable[[int], None] | None = None,
        store_process: bool = False,
        spool: str | os.PathLike[str] | None = None,
        max_spool_bytes: int = 1 << 30,
    ) -> None:
        self._owns_writer = not isinstance(store, RunWriter)
        self.writer: RunWriter | StoreProcess
        path = os.fspath(store) if isinstance(store, (str, os.PathLike)) else None
        if isinstance(store, RunWriter):
            self.writer = store
        elif store_process and not isinstance(store, TraceStore) and can_share(Redactor.from_option(redact)):
            self.writer = StoreProcess(path, sample_rate=sample_rate, redact=redact)
        else:
            self.writer = RunWriter(store, sample_rate=sample_rate, redact=redact, defer=True)
        self.spool: Spool | None = None
        if spool is not None:
            self.spool = Spool(spool, max_spool_bytes)
        elif isinstance(self.writer, StoreProcess):
            self.spool = Spool.first_free(spool_folder(path), max_spool_bytes)
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        # Compressed batches expand several-fold.
        self.max_decoded_bytes = max_decoded_bytes if max_decoded_bytes is not None else 4 * max_body_bytes
        # Bytes of bodies held at once (read and inflated), all connections together: the memory bound on requests.
        self.max_inflight_bytes = max_inflight_bytes if max_inflight_bytes is not None else 4 * max_body_bytes
        self.max_connections = max_connections
        self.max_client_connections = max_client_connections
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.min_body_rate = min_body_rate
        self._token = token.encode() if token else None
        self.assembler = IdleAssembler(
            idle_seconds=idle_seconds,
            orphan_seconds=orphan_seconds,
            max_traces=max_open_traces,
            max_spans=max_open_spans,
            max_bytes=max_open_bytes,
        )
        self._on_flush = on_flush
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # signalled when an export request finishes
        self._inflight = 0
        self._inflight_bytes = 0  # charged by requests as they read and inflate their bodies
        self._counts: dict[str, int] = {
            "export_requests": 0,
            "received_spans": 0,
            "rejected_spans": 0,
            "replay_spans": 0,
            "completed_traces": 0,
            "replayed_spans": 0,
        }
        self._handovers = Handovers()
        self._errors: dict[str, int] = {}
        self._server: Server | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> int:
        try:
            server = Server((self.host, self.port), self.max_connections, self.max_client_connections)
        except OSError as exc:
            raise ReceiverError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        server.receiver = self
        self._server = server
        if self.spool is not None:
            self._replay(self.spool)
        self.port = server.server_address[1]
        self._threads = [
            threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="harvester-receiver-http", daemon=True
            ),
            threading.Thread(target=self._sweep_loop, name="harvester-receiver-sweep", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{TRACES_PATH}"

    def stop(self, timeout: float = 10.0, store_timeout: float = 60.0) -> None:
        """Stop listening, complete what is open, and write it; waits up to ``timeout`` for requests,
        and up to ``store_timeout`` for a store process to take and write the last traces (then it
        is stopped, and what it held counted lost)."""
        server, self._server = self._server, None
        if server is not None:
            with self._lock:
                self._stopping.set()
            server.shutdown()
            server.server_close()
            for t in self._threads:
                t.join(timeout)
            with self._idle:  # requests already reading their body finish into the open traces
                self._idle.wait_for(lambda: self._inflight == 0, timeout)
        orphans: list[list[SpanData]] = []
        if self._owns_writer and isinstance(self.writer, StoreProcess):
            self.writer.stop_within(store_timeout)  # the hand-over below may wait on a stuck child
        self._complete(self.assembler.take_all(orphans), orphans)
        if self._owns_writer:
            self.writer.close()
        else:
            self.writer.flush()
        if self.spool is not None:  # all stored: the spool goes; else it is replayed at the next start
            lost = self.writer.stats()["dropped"].keys() & {"store_process", "store_error", "store_error_traces"}
            self.spool.close(stored=not lost)

    def _replay(self, spool: Spool) -> None:
        """What a crash left in the spool goes into the open traces again, as if just received."""
        for segment, kind, body in spool.recover():
            stats = OtlpStats()
            spans = (decode_json if kind == _JSON_RECORD else decode_protobuf)(body, stats)
            segment.traces.update(s.trace_id for s in spans)
            self._complete(self.assembler.add(spans))
            self._counts["replayed_spans"] += len(spans)

    def _committed(self) -> bool:
        """All spans taken out of the assembler so far are stored: once the requests handing theirs
        over now are done, a barrier through the store process (or a flush in this one)."""
        self._handovers.settled()
        if isinstance(self.writer, StoreProcess):
            return self.writer.sync()
        self.writer.flush()
        return True

    def _sweep_loop(self) -> None:
        tick = min(0.5, max(0.01, self.assembler.idle_seconds / 4))
        while not self._stopping.wait(tick):
            try:
                orphans: list[list[SpanData]] = []
                self._complete(self.assembler.take_complete(orphans), orphans)
                self.writer.flush()  # runs buffered by a quiet period are written, not held
                if self.spool is not None:
                    self.spool.release(self.assembler.open.__contains__, self._committed)
            except Exception:
                self.count_error("sweep")

    def _complete(self, traces: list[list[SpanData]], orphans: Sequence[list[SpanData]] = ()) -> None:
        """Write the complete traces; of the orphans, merge the late parts of stored traces, drop the rest."""
        self.writer.submit(traces)
        done = len(traces)
        if orphans:
            rest = self.writer.submit(orphans, late=True)
            self.assembler.drop_orphans(rest)
            done += len(orphans) - len(rest)
        if done:
            with self._lock:
                self._counts["completed_traces"] += done
            if self._on_flush is not None:
                self._on_flush(done)

    # -- requests ----------------------------------------------------------------------------
    def authorize(self, headers: Any) -> None:
        """With a token, every request needs ``Authorization: Bearer <token>`` (the scheme in any case,
        RFC 9110), checked before anything of the request is read past its headers."""
        if self._token is None:
            return
        scheme, _, credentials = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), self._token):
            raise BadRequest(401, "missing or wrong bearer token")

    def handle_export(self, headers: Any, rfile: Any, content_type: str) -> bytes:
        """One authorized ``POST /v1/traces``: the success body in the request's encoding, or ``BadRequest``."""
        if content_type == PROTOBUF:
            decode = decode_protobuf
        elif content_type == JSON:
            decode = decode_json
        else:
            raise BadRequest(415, f"unsupported Content-Type {content_type!r}; use {PROTOBUF} or {JSON}")
        encoding = (headers.get("Content-Encoding") or "").strip().lower()
        if encoding not in ("", "identity", "gzip", "deflate"):
            raise BadRequest(415, f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or none)")
        length = body_length(headers)  # None: chunked (a proxy or streaming client), the length is unknown
        if length is not None and length > self.max_body_bytes:
            raise BadRequest(413, f"body of {length} bytes exceeds the limit of {self.max_body_bytes}")
        with self._lock:
            if self._stopping.is_set():
                raise BadRequest(503, "shutting down")
            self._inflight += 1
        held = 0

        def charge(n: int) -> None:
            """Pay for ``n`` more bytes of this body (or give back ``-n``): 503 once the bodies in flight
            would hold more than the budget, unless this one holds all of it (one body always fits)."""
            nonlocal held
            with self._lock:
                if n > 0 and self._inflight_bytes + n > self.max_inflight_bytes and self._inflight_bytes > held:
                    raise BadRequest(503, "too many bodies in flight; retry shortly")
                self._inflight_bytes += n
            held += n

        try:
            return self._export(rfile, length, encoding, decode, content_type, charge)
        finally:
            with self._idle:
                self._inflight -= 1
                self._inflight_bytes -= held
                self._idle.notify_all()

    def _export(
        self,
        rfile: Any,
        length: int | None,
        encoding: str,
        decode: Callable[[bytes, OtlpStats], list[SpanData]],
        content_type: str,
        charge: Callable[[int], None],
    ) -> bytes:
        """Read the body (``length`` None: chunked), decode it and hand its spans to the assembler."""
        try:
            if length is None:
                parts = read_chunked(rfile, self.max_body_bytes, charge)
            else:
                parts = read_body(rfile, length, charge)
        except TimeoutError:
            raise BadRequest(
                408, f"body not received within {self.body_timeout:g} s at {self.min_body_rate / 1024:g} KiB/s or more"
            ) from None
        except OSError:
            raise ClientGone() from None
        if encoding in ("gzip", "deflate"):
            body = decompress(parts, encoding, self.max_decoded_bytes, charge)
        else:
            body = b"".join(parts)
        del parts
        stats = OtlpStats()
        spans = decode(body, stats)
        spool = self.spool
        if spool is not None:
            spool.check_room()
        with self._lock:
            self._counts["export_requests"] += 1
            self._counts["received_spans"] += len(spans)
            self._counts["rejected_spans"] += stats.skipped
            self._counts["replay_spans"] += stats.replay
        with self._handovers.handing():
            self._complete(self.assembler.add(spans))
        if spool is not None and spans:  # on disk before the 200: a crash from here on loses nothing acknowledged
            try:
                spool.append(_JSON_RECORD if content_type == JSON else 0, body, {s.trace_id for s in spans})
            except OSError as exc:
                raise BadRequest(503, f"cannot write the spool: {exc.strerror or exc}") from None
        return export_response(content_type, stats)

    def count_error(self, kind: int | str) -> None:
        with self._lock:
            key = str(kind)
            self._errors[key] = self._errors.get(key, 0) + 1

    def health(self) -> dict[str, Any]:
        """Counters for ``/healthz``: what came in, what was written, what was dropped and why."""
        asm = self.assembler
        with self._lock:
            out: dict[str, Any] = {
                "status": "ok",
                **self._counts,
                "inflight_requests": self._inflight,
                "inflight_bytes": self._inflight_bytes,
                "errors": dict(self._errors),
            }
        writer = self.writer.stats()
        server = self._server
        out.update(
            open_connections=server.connections if server is not None else 0,
            open_traces=asm.open_traces,
            open_spans=asm.open_spans,
            open_bytes=asm.open_bytes,
            completed_early=asm.completed_early,
            runs_written=writer["written"],
            traces_written=writer.get("traces_written", 0),
            runs_sampled_out=writer["sampled_out"],
            dropped_spans=_with_orphans(asm.dropped, writer.get("orphan_spans", 0)),
            completed_traces=out["completed_traces"] - writer.get("orphan_traces", 0),
            dropped_runs=writer["dropped"],
            spool_bytes=self.spool.held_bytes if self.spool is not None else 0,
            spool_syncs=self.spool.syncs if self.spool is not None else 0,
        )
        if writer.get("store_process") == "died":  # nothing received is stored any more: 503 on /healthz
            out["status"] = "the store process died; nothing received is stored (restart harvester serve)"
        return out


def _with_orphans(dropped: dict[str, int], orphans: int) -> dict[str, int]:
    """The assembler's drops, and the late parts the store process found no stored trace for."""
    out = dict(dropped)
    if orphans:
        out["no_agent_span"] = out.get("no_agent_span", 0) + orphans
    return out
