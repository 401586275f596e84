"""The report file, written and read a result at a time.

The file is the same JSON as ever (``harvester.report/1``), laid out so that it can be streamed: the
report's fields on the first line, ending in ``"results":[``, then one result a line (compact, in the
report's order), then ``]}``. A file of that layout is read by indexing its lines (a file offset per
result, each result validated once on the way) and parsing a result each time it is read; any other
layout (reports written before, a file pretty-printed by hand) is read whole, as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from ..errors import ReportFormatError, pydantic_field
from ._results import CaseResult
from ._spool import ResultSpool, result_line

__all__ = ["redacted_results", "report_chunks", "stream_load"]

_OPEN = b',"results":['


def report_chunks(head: dict[str, Any], results: Iterable[CaseResult]) -> Iterator[bytes]:
    """The file's bytes: ``head`` (every field but the results) on the first line, then each result."""
    yield orjson.dumps(head, option=orjson.OPT_NON_STR_KEYS)[:-1] + _OPEN + b"\n"
    sep = b""
    for r in results:
        yield sep + result_line(r)
        sep = b",\n"
    yield (b"\n" if sep else b"") + b"]}\n"


def stream_load(path: Path) -> tuple[dict[str, Any], ResultSpool, bool] | None:
    """(the fields, the results as a spool over the file, whether a result lacks its trial counts) of
    a file in the streamed layout; None for any other (read it whole). Every result is validated here,
    so a bad one is one error naming it, not a traceback when it is read later."""
    fh = path.open("rb")
    try:
        first = fh.readline()
        if not (first.startswith(b'{"schema":') and first.rstrip(b"\r\n").endswith(_OPEN)):
            fh.close()
            return None
        head = orjson.loads(first.rstrip(b"\r\n")[: -len(_OPEN)] + b"}")
        offsets: array[int] = array("q")
        untried = False
        while True:
            offset = fh.tell()
            line = fh.readline()
            if line.startswith(b"]}"):
                break
            if not line:
                raise ReportFormatError("ends before its results do (a truncated file?)", file=str(path))
            data = orjson.loads(line.rstrip().rstrip(b","))
            _validate(data, len(offsets), path)
            untried = untried or "passes" not in data
            offsets.append(offset)
    except orjson.JSONDecodeError as exc:
        fh.close()
        raise ReportFormatError(f"not JSON ({exc})", file=str(path)) from None
    except BaseException:
        fh.close()
        raise
    if not isinstance(head, dict):
        fh.close()
        return None
    return head, ResultSpool.over(fh, offsets), untried


def _validate(data: Any, index: int, path: Path) -> None:
    try:
        CaseResult.model_validate(data)
    except ValidationError as exc:
        field, msg = pydantic_field(exc)
        raise ReportFormatError(msg, file=str(path), field=f"results.{index}.{field}") from None


def redacted_results(
    results: Sequence[CaseResult], redact: Callable[[CaseResult], CaseResult]
) -> Sequence[CaseResult] | None:
    """``results`` with ``redact`` applied to each, as the same kind of sequence (a spool stays on disk);
    None when that changes none of them."""
    out: list[CaseResult] | ResultSpool = ResultSpool() if isinstance(results, ResultSpool) else []
    changed = False
    for r in results:
        done = redact(r)
        changed = changed or done is not r
        if isinstance(out, ResultSpool):
            out.add(done)
        else:
            out.append(done)
    return out if changed else None
