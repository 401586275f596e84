"""A replay's report: the results of every case, the figures over them, saved as JSON (the next baseline)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_serializer

from .._files import write_file
from ..errors import ReportFormatError, pydantic_field
from . import _render as render
from ._compare import ALPHA, Comparison, compare
from ._judging import Judging
from ._metrics import by_tag, metrics_of, pass_hat_k, pass_hat_k_by_tag
from ._results import CaseResult
from ._spool import kept
from ._stream import redacted_results, report_chunks, stream_load

if TYPE_CHECKING:
    from ..redact import Redactor
    from ._gates import GateOutcome

__all__ = ["Report", "SCHEMA", "redacted"]

SCHEMA = "harvester.report/1"
DERIVED = "pass_hat_k"  # written for readers, recomputed from the results on load


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Report(_Strict):
    schema_: str = Field(SCHEMA, alias="schema")
    suite: str = "suite"
    suite_version: str | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    trials: int = 1
    shard: str | None = None  # "i/n" when this report covers one shard
    # A list, or a ``ResultSpool`` (a replay's results as its cases finished, a report file read one
    # result a line): every figure below is computed in passes over it, never by holding it whole.
    results: Sequence[CaseResult] = Field(default_factory=list)
    # Tool calls refused during the replay for lacking their case's context, each counted once (the cases
    # in flight name them, but the one that made the call may have finished already).
    refused: int = 0
    refused_calls: list[str] = Field(default_factory=list)
    # Whether the replay ran sealed (docs/seal.md); False: ``--no-seal``, said in every rendering.
    # None in reports written before the seal.
    sealed: bool | None = None
    # How the agent's model was served (--model): live, recorded, recorded-then-live; None in older reports.
    model: str | None = None
    # The sandbox tools (names or globs) a ``--sandbox`` replay let run for real; None without --sandbox.
    sandbox: list[str] | None = None
    # What the judges did (calls, cache hits, their own token cost, calibration); None: no judge ran.
    judging: Judging | None = None
    # The release gate as the command that wrote this file judged it (``GateOutcome.to_dict()``, the
    # object ``harvester compare --json`` prints): for whoever reads the file; never read back as a verdict.
    release_gate: dict[str, Any] | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_serializer("results")
    def _all_results(self, results: Sequence[CaseResult]) -> list[CaseResult]:
        """``model_dump`` holds every result, read from a spool if need be; the file is written a result
        at a time (``chunks``)."""
        return list(results)

    # How an older report was read (no trial counts), for the comparison's warnings; never saved.
    _read_note: str | None = PrivateAttr(default=None)

    @property
    def read_note(self) -> str | None:
        return self._read_note

    def unsealed_lines(self) -> list[str]:
        """The warning every rendering of an unsealed replay carries, and every command that reads its
        report prints (none when it was sealed)."""
        if self.sealed is not False:
            return []
        return [
            "warning: replayed without the seal (--no-seal): connections and processes the agent "
            "started were not checked, so a tool body may have reached the outside world"
        ]

    def note_lines(self, shown: int = 3) -> list[str]:
        """Each note the cases carry (what the replay did otherwise than the case recorded, such as an MCP
        server it had to start, and why), once, with how many cases carry it."""
        counts: dict[str, int] = {}
        for r in self.results:
            for n in r.notes:
                counts[n] = counts.get(n, 0) + 1
        lines = [f"note ({c} case{'s' if c != 1 else ''}): {n}" for n, c in list(counts.items())[:shown]]
        if len(counts) > shown:
            lines.append(f"... and {len(counts) - shown} more notes (every case's in --json)")
        return lines

    def sandbox_line(self) -> str | None:
        """With ``--sandbox``, one line: the tools that ran for real (calls, and how many answered
        otherwise than production), every other tool served from fixtures (None without --sandbox)."""
        if self.sandbox is None:
            return None
        ran: dict[str, list[int]] = {}  # tool -> [calls, differing]
        for r in self.results:
            for c in r.sandboxed:
                counts = ran.setdefault(c.tool, [0, 0])
                counts[0] += 1
                counts[1] += bool(c.differs)
        if not ran:
            return f"sandbox ({', '.join(self.sandbox)}): no tool ran for real; every tool served from fixtures"
        parts = []
        for tool, (n, differ) in ran.items():
            said = f", {differ} differ{'s' * (differ == 1)} from production" if differ else ""
            parts.append(f"{tool} ({n} call{'s' * (n != 1)}{said})")
        tools = ", ".join(parts)
        return f"sandbox: ran for real {tools}; every other tool served from fixtures"

    def judging_lines(self) -> list[str]:
        """The judges' bill, then a warning per judge that gated cases uncalibrated ([] without judges)."""
        return [] if self.judging is None else [self.judging.line(), *self.judging.warnings()]

    def model_line(self) -> str | None:
        """With a recorded model, one line: cases served entirely from the recording, cases that drifted
        and why, cases it could not serve; usage and cost of served steps are the recorded ones."""
        mode: str | None = None
        counts = {"served": 0, "unasked": 0, "drifted": 0, "unservable": 0, "live": 0, "steps": 0}
        why: dict[str, int] = {}
        for r in self.results:  # one pass, a case at a time
            m = r.model
            if m is None:
                continue
            mode = mode or m.mode
            if m.drift is None and m.unservable is None:
                counts["served" if m.served > 0 else "unasked"] += 1
            if m.drift is not None:
                counts["drifted"] += 1
                for w in m.drift.what:
                    why[w] = why.get(w, 0) + 1
            counts["unservable"] += m.unservable is not None
            counts["live"] += m.live_from is not None
            counts["steps"] += m.served
        if mode is None:
            return None
        parts = [f"{counts['served']} served from the recording"]
        if counts["unasked"]:  # a model call the recording never saw: a framework it does not serve, or none made
            parts.append(f"{counts['unasked']} never asked it")
        if counts["drifted"]:
            causes = ", ".join(w if len(why) == 1 else f"{w} {n}" for w, n in why.items())
            parts.append(f"{counts['drifted']} drifted ({causes})")
        if counts["unservable"]:
            parts.append(f"{counts['unservable']} without a servable recording")
        if counts["live"]:
            parts.append(f"{counts['live']} continued live")
        steps = counts["steps"]
        return (
            f"model {self.model or mode}: "
            + ", ".join(parts)
            + (f"; usage and cost of {steps} served step{'s' * (steps != 1)} as recorded" if steps else "")
        )

    # -- metrics -----------------------------------------------------------------------------
    def _cases(self) -> Iterator[CaseResult]:
        return (r for r in self.results if r.variant_of is None and not r.errored)

    @property
    def cases(self) -> Sequence[CaseResult]:
        """The suite's own cases the replay could evaluate: every result but the failure-injection
        variants (``recovery()`` has those) and the errored ones (``errored`` counts those)."""
        return kept(self.results, lambda r: r.variant_of is None and not r.errored)

    @property
    def errored(self) -> Sequence[CaseResult]:
        """Results the harness could not evaluate (no agent built, a framework left unguarded)."""
        return kept(self.results, lambda r: r.errored)

    @property
    def variants(self) -> Sequence[CaseResult]:
        return kept(self.results, lambda r: r.variant_of is not None)

    @property
    def passed(self) -> int:
        """Cases that passed (variants are counted by ``recovery()`` and the ``recovery`` line)."""
        return sum(r.passed for r in self._cases())

    @property
    def pass_rate(self) -> float:
        n, passed = _count(r.passed for r in self._cases())
        return passed / n if n else 0.0

    @property
    def mean_steps(self) -> float:
        n, steps = _count(r.steps for r in self._cases())
        return steps / n if n else 0.0

    @property
    def total_cost(self) -> float:
        """The cases' cost (every trial); injected-failure variants are priced in their own report lines."""
        return sum((r.cost or 0.0) * r.trials for r in self._cases())

    def cost_text(self) -> str:
        """The total cost of the cases whose cost is known, saying how many are not; "n/a" when none is
        (no token prices configured, or the spans held no token counts)."""
        n, unknown = _count(r.cost is None for r in self._cases())
        if unknown == n:
            return "n/a"
        return f"{self.total_cost:.6f}" + (f" ({unknown} case{'s' * (unknown != 1)} n/a)" if unknown else "")

    def by_tag(self) -> dict[str, float]:
        """Pass rate per tag, sorted by tag: where an aggregate hides compensating movement.

        Variants carry only ``recovery`` and ``recovery/<mode>``, so a case tag counts cases only.
        """
        return by_tag(self.results)

    def metrics(self, tag: str | None = None) -> dict[str, float | None]:
        if tag is not None:
            return metrics_of(r for r in self.results if tag in r.tags)
        return metrics_of(self.results, refused=self.refused)

    def pass_hat_k(self, tag: str | None = None) -> dict[int, float]:
        """pass^k, k = 1..trials (tau-bench's estimator), over the suite's cases or one tag's."""
        results = self.results if tag is None else (r for r in self.results if tag in r.tags)
        return pass_hat_k(results, self.trials)

    def pass_hat_k_by_tag(self) -> dict[str, dict[int, float]]:
        return pass_hat_k_by_tag(self.results, self.trials)

    def headline(self) -> str:
        """``9/12 passed  (75%)``; with trials, "passed every trial" and the mean pass rate, labelled."""
        n = passed = errored_n = 0
        rates = 0.0
        for r in self.results:
            if r.errored:
                errored_n += 1
            elif r.variant_of is None:
                n, passed, rates = n + 1, passed + r.passed, rates + r.pass_rate
        rate = passed / n if n else 0.0
        errored = f"   {errored_n} errored" if errored_n else ""
        if self.trials <= 1:
            return f"{passed}/{n} passed  ({rate:.0%}){errored}"
        mean = rates / n if n else 0.0
        return f"{passed}/{n} passed every trial  ({rate:.0%})   mean pass rate {mean:.0%}{errored}"

    def recovery(self) -> dict[str, dict[str, float]]:
        """Recovery rate of the failure-injection variants per mode and per tool."""
        out: dict[str, dict[str, list[float]]] = {"by_mode": {}, "by_tool": {}}
        for r in self.results:
            if r.injected is not None:
                out["by_mode"].setdefault(r.injected.mode, []).append(r.pass_rate)
                out["by_tool"].setdefault(r.injected.tool, []).append(r.pass_rate)
        return {k: {name: sum(v) / len(v) for name, v in sorted(d.items())} for k, d in out.items()}

    def result(self, case_id: str) -> CaseResult | None:
        return next((r for r in self.results if r.id == case_id), None)

    # -- baseline ------------------------------------------------------------------------------
    def compare(self, baseline: Report, alpha: float = ALPHA) -> Comparison:
        return compare(self, baseline, alpha)

    def regressed_against(self, baseline: Report) -> list[str]:
        """Ids that passed in ``baseline`` and fail now (with trials: significantly less often), sorted."""
        return self.compare(baseline).regressed

    def improved_against(self, baseline: Report) -> list[str]:
        return self.compare(baseline).improved

    # -- rendering ---------------------------------------------------------------------------
    def summary(self) -> str:
        """The terminal summary: headline, tags, trials, recovery, failing cases, what left the recording."""
        return render.summary(self)

    def differing(self) -> Iterator[tuple[CaseResult, str]]:
        """Every result whose replay made no_fixture calls or left the recorded path, passing or not,
        one at a time."""
        for r in self.results:
            text = r.differences()
            if text:
                yield r, text

    def recovery_line(self) -> str:
        rate = self.metrics()["recovery_rate"] or 0.0
        return f"recovery {rate:.0%}: " + "  ".join(f"{m}={v:.0%}" for m, v in self.recovery()["by_mode"].items())

    def to_junit(self) -> bytes:
        return render.junit(self)

    def junit_chunks(self) -> Iterator[bytes]:
        """The JUnit XML as it is written, a testcase at a time."""
        return render.junit_chunks(self)

    def to_markdown(self, outcome: GateOutcome | None = None) -> str:
        return render.markdown(self, outcome)

    # -- files -------------------------------------------------------------------------------
    def chunks(self) -> Iterator[bytes]:
        """The report file as it is written, a result a line (``_stream``): its fields, and its pass^k
        (by tag too) for whoever reads the file (derived, recomputed on load), then the results."""
        head = self.model_dump(mode="json", by_alias=True, exclude={"results"})
        if self.trials > 1:
            head[DERIVED] = {"suite": self.pass_hat_k(), "by_tag": self.pass_hat_k_by_tag()}
        return report_chunks(head, self.results)

    def to_json(self) -> bytes:
        return b"".join(self.chunks())

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically (a temporary sibling, then a rename), a result at a time;
        ``OutputError`` when it cannot."""
        write_file(path, self.chunks(), atomic=True)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """A report file: one written a result a line is read as it is needed (memory flat in its cases);
        any other (older reports, pretty-printed) whole."""
        p = Path(path)
        try:
            streamed = stream_load(p)
            if streamed is not None:
                head, results, note_needed = streamed
                report = cls.from_data({**head, "results": []}, file=str(p))
                report.results = results
                if note_needed:
                    report._read_note = _read_note(report.trials, str(p))
                return report
            data = orjson.loads(p.read_bytes())
        except FileNotFoundError:
            raise ReportFormatError("no such file", file=str(p)) from None
        except orjson.JSONDecodeError as exc:
            raise ReportFormatError(f"not JSON ({exc})", file=str(p)) from None
        return cls.from_data(data, file=str(p))

    @classmethod
    def from_data(cls, data: Any, *, file: str | None = None) -> Report:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ReportFormatError(f"not a harvester report (expected schema {SCHEMA!r})", file=file, field="schema")
        try:
            report = cls.model_validate({k: v for k, v in data.items() if k != DERIVED})
        except ValidationError as exc:
            field, msg = pydantic_field(exc)
            raise ReportFormatError(msg, file=file, field=field) from None
        results = data.get("results")
        if isinstance(results, list) and any(isinstance(r, dict) and "passes" not in r for r in results):
            report._read_note = _read_note(report.trials, file)
        return report


def _read_note(trials: int, file: str | None) -> str:
    return (
        f"{file or 'the baseline'} has no trial counts (a report from before trials): read as "
        f"{trials} trial per case, passes = trials if the case passed, else 0"
        if trials == 1
        else f"{file or 'the baseline'} has no per-case pass counts: read as every trial passed or "
        "every trial failed, as each case's verdict says"
    )


def _count(values: Iterator[Any]) -> tuple[int, Any]:
    """(how many, their sum) in one pass."""
    n, total = 0, 0
    for v in values:
        n, total = n + 1, total + v
    return n, total


_Model = TypeVar("_Model", Report, CaseResult)


def redacted(model: _Model, redactor: Redactor | None) -> _Model:
    """A report (or one case's result) with ``redactor`` applied to every string in it, itself when that
    changes nothing: an agent that echoes a secret, or a check quoting it, must not carry it into a file,
    a log or a test report."""
    if redactor is None:
        return model
    if isinstance(model, Report):  # a result at a time: the redacted results go to a spool of their own
        head = redacted_value(model.model_dump(mode="json", by_alias=True, exclude={"results"}), redactor)
        results = redacted_results(model.results, lambda r: redacted(r, redactor))
        if head is None and results is None:
            return model
        copy = Report.from_data({**(head or model.model_dump(mode="json", by_alias=True, exclude={"results"}))})
        copy.results = results if results is not None else model.results
        return copy
    plain = model.model_dump(mode="json", by_alias=True)
    data = redactor.redact_value(plain)
    return model if data == plain else CaseResult.model_validate(data)


def redacted_value(plain: dict[str, Any], redactor: Redactor) -> dict[str, Any] | None:
    """``plain`` redacted, None when that changes nothing."""
    data = redactor.redact_value(plain)
    return None if data == plain else data
