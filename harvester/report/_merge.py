"""Shard reports into one: every shard exactly once, one suite, no case twice."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ReportFormatError
from ._judging import Judging
from ._report import Report
from ._spool import ResultSpool

__all__ = ["check_shards", "merge"]


def merge(reports: Iterable[Report]) -> Report:
    """One report from shard reports of the same suite; a case in two shards is an error.

    Shard reports (``shard`` = ``"i/n"``) must cover 1..n exactly once, all with the same n: a shard
    that crashed and wrote nothing must fail the job, never pass it with a fraction of the suite.
    Reports without a shard (run whole, or written before shards) are merged as they are, but never
    mixed with shard reports.
    """
    reports = list(reports)
    if not reports:
        raise ReportFormatError("nothing to merge")
    check_shards([r.shard for r in reports])
    first = reports[0]
    seen: set[str] = set()
    results = ResultSpool()  # each shard's results read and written a case at a time
    for rep in reports:
        if (rep.suite, rep.suite_version) != (first.suite, first.suite_version):
            raise ReportFormatError(
                f"cannot merge suite {rep.suite} {rep.suite_version} into {first.suite} {first.suite_version}"
            )
        for r in rep.results:
            if r.id in seen:
                raise ReportFormatError(f"case {r.id!r} appears in two reports (overlapping shards?)")
            seen.add(r.id)
            results.add(r)
    merged = Report(
        suite=first.suite,
        suite_version=first.suite_version,
        trials=max(r.trials for r in reports),
        refused=sum(r.refused for r in reports),
        refused_calls=[c for r in reports for c in r.refused_calls],
        sealed=_sealed([r.sealed for r in reports]),
        model=first.model,
        sandbox=first.sandbox,
        judging=Judging.merged(r.judging for r in reports),
    )
    merged.results = results
    return merged


def _sealed(shards: list[bool | None]) -> bool | None:
    """Unsealed when any shard was (``--no-seal``): its warning must survive the merge; sealed when every
    shard says so; None when a shard predates the seal and none ran without it."""
    if False in shards:
        return False
    return True if all(shards) else None


def check_shards(shards: list[str | None]) -> None:
    """Shard labels (``i/n``) that cover 1..n exactly once, all of one split; or none at all."""
    if all(s is None for s in shards):
        return
    if any(s is None for s in shards):
        raise ReportFormatError(
            f"cannot merge whole-suite reports with shard reports (shards: {', '.join(s or 'none' for s in shards)})"
        )
    parsed: list[tuple[int, int]] = []
    for s in shards:
        i, _, n = (s or "").partition("/")
        if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
            raise ReportFormatError(f"shard {s!r} is not I/N", field="shard")
        parsed.append((int(i), int(n)))
    counts = sorted({n for _, n in parsed})
    if len(counts) > 1:
        raise ReportFormatError(
            f"cannot merge shards of different splits ({', '.join(sorted(set(shards)))})"  # type: ignore[arg-type]
            ": every shard must come from the same --shard I/N run"
        )
    split = counts[0]
    have = [i for i, _ in parsed]
    twice = sorted({i for i in have if have.count(i) > 1})
    if twice:
        raise ReportFormatError(f"shard {', '.join(f'{i}/{split}' for i in twice)} given more than once")
    missing = [i for i in range(1, split + 1) if i not in have]
    if missing:
        raise ReportFormatError(
            f"missing shard {', '.join(f'{i}/{split}' for i in missing)} (got "
            f"{', '.join(f'{i}/{n}' for i in sorted(have))}): a shard that did not "
            "finish must not pass the gate"
        )
