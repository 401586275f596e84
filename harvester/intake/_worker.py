"""One ``harvester ingest`` worker process: it parses the chunks it is sent and keeps their spans, then
turns the traces it holds into rows when asked (``_messages`` has the protocol).

Parsed spans never cross a process boundary in the common case: pickling them costs more than
parsing them. Only the rows go back.
"""

from __future__ import annotations

import gc
import pickle
import queue
import signal
import threading
import traceback
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import orjson

from ..errors import OtlpFormatError
from ..redact import Redactor
from ..spans import OtlpStats, SpanData, line_message, spans_of_document
from ..store import spans_blob
from ._messages import Clear, Export, Failed, Import, Parse, Parsed, ParseError, Parts, Rows, Stop, Write
from ._pipeline import RunWriter, merged_spans

__all__ = ["LineError", "parse_chunk", "worker_main"]


class _Rows:
    """The worker's ``RowSink``: ``RunWriter`` hands it ready rows, which go back to the parent."""

    path = "<ingest worker>"

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add_many(
        self, items: Iterable[Any], *, replace_traces: Iterable[str] = (), inbox: Sequence[tuple[Any, ...]] = ()
    ) -> int:
        before = len(self.rows)
        self.rows.extend(tuple(r) for r in items)  # plain tuples pickle several times faster than Row
        return len(self.rows) - before

    def spans_of(self, trace_ids: Iterable[str]) -> dict[str, list[SpanData]]:
        return {}  # the parent reads what is stored, and sends it along (Import)

    def close(self) -> None:
        pass


def worker_main(
    requests: Connection, replies: Connection, redactor: Redactor | None, inherited: Sequence[Connection]
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which terminates us
    for conn in inherited:  # a forked child holds the parent's ends of every pipe: drop them
        conn.close()
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def receive() -> None:  # always drain the request pipe, so the parent never blocks sending
        try:
            while True:
                inbox.put(requests.recv())
        except (EOFError, OSError):
            inbox.put(None)  # the parent is gone

    def send() -> None:  # replies are written while the next request is worked on
        try:
            while (data := outbox.get()) is not None:
                replies.send_bytes(data)
        except OSError:
            pass

    threading.Thread(target=receive, daemon=True).start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def reply(msg: tuple[Any, ...]) -> None:
        outbox.put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    sink = _Rows()
    writer = RunWriter(sink, redact=redactor, batch_size=1 << 62)
    held: dict[int, dict[str, list[SpanData]]] = {}  # chunk key -> trace id -> its spans in that chunk
    try:
        while (msg := inbox.get()) is not None:
            if isinstance(msg, Parse):
                key, kind, name, payload = msg
                del msg
                gc.disable()  # parsing builds trees without cycles: collections would only cost time
                try:
                    reply(parse_chunk(held, key, kind, name, payload))
                except LineError as exc:
                    reply(ParseError(key, exc.args[0], name, None, exc.args[1]))
                except OtlpFormatError as exc:
                    reply(ParseError(key, str(exc), exc.file, exc.field, None))
                del payload
                gc.freeze()  # the held spans live until written: keep the collector off them
                gc.enable()
            elif isinstance(msg, Write):
                counts: list[int | None] = []
                no_agent: list[tuple[str, bytes]] = []
                for tid, keys in msg.items:
                    spans = held[keys[0]].pop(tid)
                    for k in keys[1:]:
                        spans.extend(held[k].pop(tid))
                    merged = merged_spans([], spans)
                    counts.append(written := writer.process_trace(merged))
                    if written is None:
                        no_agent.append((tid, spans_blob(merged)))
                writer.flush(raise_errors=True)
                rows, sink.rows = sink.rows, []
                lost, writer.dropped = writer.dropped, {}
                reply(Rows(msg.batch, counts, rows, lost, no_agent))
            elif isinstance(msg, Export):
                reply(Parts([(tid, k, held[k].pop(tid)) for tid, k in msg.items]))
            elif isinstance(msg, Import):
                for tid, k, spans in msg.parts:
                    held.setdefault(k, {})[tid] = spans
            elif isinstance(msg, Clear):
                held.clear()
                gc.unfreeze()
            elif isinstance(msg, Stop):
                break
    except BaseException as exc:
        reply(Failed(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    outbox.put(None)
    sender.join()


class LineError(Exception):
    """Invalid JSON at a line of a chunk: (message, line number within the chunk)."""


def parse_chunk(held: dict[int, dict[str, list[SpanData]]], key: int, kind: str, name: str, payload: Any) -> Parsed:
    """One chunk: what ``iter_otlp_documents`` + ``spans_from_otlp`` read from those lines."""
    stats = OtlpStats()
    groups: dict[str, list[SpanData]] = {}
    held[key] = groups
    nlines = 0
    if kind == "doc":
        try:
            docs: Iterable[tuple[int | None, Any]] = ((None, orjson.loads(payload)),)
        except orjson.JSONDecodeError as exc:  # a slice of a big document holds a span that is not JSON
            raise OtlpFormatError(f"invalid JSON in a span or a resource ({exc.msg})", file=name) from None
    else:
        if kind == "range":
            path, start, end = payload
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    payload = f.read(end - start)
            except OSError as exc:
                raise OtlpFormatError(f"cannot read ({exc.strerror})", file=name) from None
        lines = payload.splitlines()
        nlines = len(lines)  # every chunk but the last ends with a newline
        docs = _docs(lines)
    for line, doc in docs:
        try:
            spans = list(spans_of_document(doc, stats, file=name, line=None))
        except OtlpFormatError as exc:
            if line is None:
                raise
            raise LineError(line_message(exc), line) from None
        for span in spans:
            group = groups.get(span.trace_id)
            if group is None:
                groups[span.trace_id] = [span]
            else:
                group.append(span)
    return Parsed(key, list(groups), stats.spans, stats.skipped, stats.reasons, nlines)


def _docs(lines: list[bytes]) -> Iterator[tuple[int, Any]]:
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            yield n, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LineError(f"invalid JSON ({exc})", n) from None
