"""Case results kept on disk, one JSON line each, read back one at a time: what lets a replay's memory
stay flat in the number of cases (each result goes to the spool as its case finishes) and what lets
``compare``, ``merge`` and ``report --html`` read a report written one result a line without loading it.

A spool is a ``Sequence[CaseResult]``: what it keeps per case is one file offset (8 bytes), in the
order the results are to be read, whatever order they were added in.
"""

from __future__ import annotations

import tempfile
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import IO, overload

import orjson

from ._results import CaseResult

__all__ = ["ResultSpool", "kept", "result_line"]

_UNSET = -1


def result_line(result: CaseResult) -> bytes:
    """One result as a spool and a report file keep it: compact JSON on one line (no newline)."""
    return orjson.dumps(result.model_dump(mode="json", by_alias=True))


class ResultSpool(Sequence[CaseResult]):
    """Results in a binary file, read back by offset. ``add`` appends (a temporary file of its own when
    made with ``ResultSpool()``); ``over`` reads a file someone else wrote, at the offsets given. The
    file stays open for the spool's life: a report file replaced on disk meanwhile (``--json`` naming
    the ``--baseline``) is still read as it was."""

    def __init__(self, file: IO[bytes] | None = None, offsets: array[int] | None = None) -> None:
        self._file = file if file is not None else tempfile.TemporaryFile()
        self._offsets: array[int] = offsets if offsets is not None else array("q")
        self._count = len(self._offsets)  # offsets set: fewer than the array holds while positions are missing
        self._lock = threading.Lock()  # one seek-and-read at a time: results are read from any thread

    @classmethod
    def over(cls, file: IO[bytes], offsets: array[int]) -> ResultSpool:
        return cls(file, offsets)

    def add(self, result: CaseResult, position: int | None = None) -> None:
        """Append ``result``; ``position``: where it reads in the spool (a replay's plan order, whatever
        order its cases finish in), else after every result added so far."""
        line = result_line(result) + b"\n"
        with self._lock:
            self._file.seek(0, 2)
            offset = self._file.tell()
            self._file.write(line)
        at = len(self._offsets) if position is None else position
        if at >= len(self._offsets):
            self._offsets.extend([_UNSET] * (at + 1 - len(self._offsets)))
        self._count += self._offsets[at] == _UNSET
        self._offsets[at] = offset

    def where(self, keep: Callable[[CaseResult], bool]) -> ResultSpool:
        """The results ``keep`` accepts, in order: a spool over the same file (their offsets only)."""
        offsets = array("q", (off for off, r in zip(self._present(), self) if keep(r)))
        spool = ResultSpool(self._file, offsets)
        spool._lock = self._lock
        return spool

    def _present(self) -> Iterator[int]:
        return (off for off in self._offsets if off != _UNSET) if self._gappy() else iter(self._offsets)

    def _gappy(self) -> bool:
        return self._count != len(self._offsets)

    def _read(self, offset: int) -> CaseResult:
        with self._lock:
            self._file.seek(offset)
            line = self._file.readline()
        return CaseResult.model_validate_json(line.rstrip().rstrip(b","))

    def __iter__(self) -> Iterator[CaseResult]:
        return (self._read(off) for off in self._present())

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> CaseResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[CaseResult]: ...
    def __getitem__(self, index: int | slice) -> CaseResult | list[CaseResult]:
        offsets = array("q", self._present()) if self._gappy() else self._offsets
        if isinstance(index, slice):
            return [self._read(off) for off in offsets[index]]
        return self._read(offsets[index])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[list[CaseResult]], tuple[list[CaseResult]]]:
        """A copy or a pickle (a report sent to another process) holds the results themselves: a list."""
        return list, (list(self),)


def kept(results: Sequence[CaseResult], keep: Callable[[CaseResult], bool]) -> Sequence[CaseResult]:
    """The results ``keep`` accepts, as the same kind of sequence: a spool stays on disk."""
    if isinstance(results, ResultSpool):
        return results.where(keep)
    return [r for r in results if keep(r)]
