"""``harvester ingest``'s input: a file (or stdin) opened with one-line errors, and ``Input``, which cuts
a big one into the parse requests its workers (or ``--jobs 1``) read, segment by segment.

A file of JSON lines (the Collector file exporter's) is cut at line ends into ``CHUNK_BYTES`` pieces;
one document into slices of ``SLICE_SPANS`` spans: parsed here and re-cut when it is smaller than
``SEGMENT_BYTES``, else cut as it is read (``_document``), never all in memory. Every
``SEGMENT_BYTES`` of them, ``SEGMENT_END`` says that what was read so far is to be written before
more is read: memory then holds a segment, never the file.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Iterator
from typing import IO, Any

import orjson

from ..errors import OtlpFormatError
from ..spans import iter_otlp_documents
from ._collector import paused
from ._document import Unfollowable, slices

__all__ = ["CHUNK_BYTES", "SEGMENT_BYTES", "SEGMENT_END", "SLICE_SPANS", "Input", "InputFile", "read"]

CHUNK_BYTES = 4 * 1024 * 1024  # bytes of JSON lines per parse request
SLICE_SPANS = 3_000  # spans of a single big document per parse request: about CHUNK_BYTES of JSON
SEGMENT_BYTES = 64 * 1024 * 1024  # of a big file, parsed and written before the next is read
SEGMENT_END = ("segment", None)  # what ``Input.chunks`` yields between two segments


class InputFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.stream: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.path == "-":
            return sys.stdin.buffer
        try:
            self.stream = open(self.path, "rb")
        except OSError as exc:
            raise OtlpFormatError(f"cannot read ({exc.strerror})", file=self.path) from None
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            self.stream.close()


def read(stream: IO[bytes], n: int, path: str) -> bytes:
    try:
        return stream.read(n) if n >= 0 else stream.read()
    except OSError as exc:
        raise OtlpFormatError(f"cannot read ({exc.strerror})", file=path) from None


class Input:
    """A big input cut into parse requests ``(kind, payload)``, as ``iter_otlp_documents`` reads it.

    JSON lines (the first line is a whole document): ``("range", (path, start, end))`` byte ranges
    of whole lines that the worker reads itself, or for a pipe ``("lines", bytes)``. One document:
    ``("doc", bytes)`` slices of its ``resourceSpans``.
    """

    def __init__(self, stream: IO[bytes], head: bytes, path: str, name: str) -> None:
        self.stream, self.head, self.path, self.name = stream, head, path, name

    def _more(self) -> bytes:
        return read(self.stream, CHUNK_BYTES, self.path)

    def chunks(self) -> Iterator[tuple[str, Any]]:
        """The parse requests, with ``SEGMENT_END`` between segments of about ``SEGMENT_BYTES``."""
        size = 0
        for chunk in self._chunks():
            kind, payload = chunk
            n = payload[2] - payload[1] if kind == "range" else len(payload)
            if size and size + n > SEGMENT_BYTES:
                yield SEGMENT_END
                size = 0
            size += n
            yield chunk

    def _chunks(self) -> Iterator[tuple[str, Any]]:
        buf = self.head.lstrip()  # iter_otlp_documents numbers the lines of the stripped text
        self.head = b""
        while not buf:
            more = self._more()
            if not more:
                return
            buf = more.lstrip()
        # The first line, read up to SEGMENT_BYTES: a whole document there means JSON lines.
        parts, size, nl = [buf], len(buf), buf.find(b"\n")
        while nl < 0 and size < SEGMENT_BYTES and (more := self._more()):
            found = more.find(b"\n")
            nl = size + found if found >= 0 else -1
            parts.append(more)
            size += len(more)
        buf = b"".join(parts)
        lines = False
        if nl >= 0:
            try:
                orjson.loads(buf[:nl])
                lines = True
            except orjson.JSONDecodeError:
                pass
        if not lines:  # one document: whole when small, for the reference path's exact errors; else in pieces
            parts, size = [buf], len(buf)
            del buf
            while size < SEGMENT_BYTES and (more := self._more()):
                parts.append(more)
                size += len(more)
            if size < SEGMENT_BYTES:
                yield from self._document(b"".join(parts))
            else:  # a line this long is a document too: the walk reads any that follow it
                parts[:] = [b"".join(parts)]
                yield from self._pieces_of_document(parts)
        elif self.path != "-" and _regular(self.stream):
            yield from self._ranges(self.stream.tell() - len(buf))
        else:
            yield from self._pieces(buf)

    def _ranges(self, pos: int) -> Iterator[tuple[str, Any]]:
        """Whole-line byte ranges of a regular file: only the bytes around each cut are read here."""
        size = os.fstat(self.stream.fileno()).st_size  # the file as it is now, as a read_bytes would see it
        path = os.path.abspath(self.path)
        while pos < size:
            end = pos + CHUNK_BYTES
            if end >= size:
                end = size
            else:
                self.stream.seek(end)
                while True:
                    block = read(self.stream, 1 << 16, self.path)
                    nl = block.find(b"\n")
                    if nl >= 0 or not block:
                        end = min(size, end + nl + 1 if nl >= 0 else size)
                        break
                    end += len(block)
            yield "range", (path, pos, end)
            pos = end

    def _pieces(self, buf: bytes) -> Iterator[tuple[str, Any]]:
        """Whole-line pieces of a stream (stdin, a pipe): sent to the workers as bytes."""
        parts = [buf]
        size = len(buf)
        while True:
            more = self._more()
            if more:
                parts.append(more)
                size += len(more)
                if size < CHUNK_BYTES:
                    continue
            data = b"".join(parts)
            cut = data.rfind(b"\n") + 1 if more else len(data)
            if cut == 0:  # one line longer than a chunk: keep reading
                parts, size = [data], len(data)
                continue
            if cut:
                yield "lines", data[:cut]
            if not more:
                return
            parts = [data[cut:]]
            size = len(parts[0])

    def _pieces_of_document(self, head: list[bytes]) -> Iterator[tuple[str, Any]]:
        """A document of ``SEGMENT_BYTES`` or more, cut into slices as it is read (``_document.slices``).
        ``head``: its first bytes, in a list this takes them from, so that no frame keeps them."""
        try:
            for piece in slices(self._more, head.pop(), SLICE_SPANS):
                yield "doc", piece
        except Unfollowable as exc:
            why, at = exc.args
            raise OtlpFormatError(
                f"cannot be read a piece at a time, as a document this big is: {why} near character {at:,} "
                "(it must be OTLP/JSON as exporters write it; or import it as JSON lines)",
                file=self.name,
                field="resourceSpans",
            ) from None

    def _document(self, data: bytes) -> Iterator[tuple[str, Any]]:
        """One big document: parsed here, its ``resourceSpans`` re-cut into slices for the workers."""
        with paused():  # orjson builds a tree without cycles: collections while it grows only cost time
            docs = list(iter_otlp_documents(data, file=self.name))  # its errors, exactly
        del data
        for doc in docs:
            if not isinstance(doc, dict) or "resourceSpans" not in doc:
                raise OtlpFormatError(
                    "not an OTLP/JSON traces document (no resourceSpans)", file=self.name, field="resourceSpans"
                )
            rspans = doc["resourceSpans"]
            if not isinstance(rspans, list):
                raise OtlpFormatError("must be a list", file=self.name, field="resourceSpans")
            start, weight = 0, 0
            for i, rs in enumerate(rspans):
                weight += _span_count(rs)
                if weight >= SLICE_SPANS:
                    yield "doc", orjson.dumps({"resourceSpans": rspans[start : i + 1]})
                    start, weight = i + 1, 0
            if start < len(rspans) or not rspans:
                yield "doc", orjson.dumps({"resourceSpans": rspans[start:]})


def _regular(stream: IO[bytes]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def _span_count(rs: Any) -> int:
    if not isinstance(rs, dict):
        return 1
    n = 0
    for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ():
        spans = ss.get("spans") if isinstance(ss, dict) else None
        n += len(spans) if isinstance(spans, list) else 1
    return n
