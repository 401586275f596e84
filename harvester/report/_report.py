"""A replay's report: the results of every case, the figures over them, saved as JSON (the next baseline)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from .._files import write_file
from ..errors import ReportFormatError, pydantic_field
from . import _render as render
from ._compare import ALPHA, Comparison, compare
from ._judging import Judging
from ._metrics import by_tag, metrics_of, pass_hat_k
from ._results import CaseResult

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
    results: list[CaseResult] = Field(default_factory=list)
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
    # How an older report was read (no trial counts), for the comparison's warnings; never saved.
    _read_note: str | None = PrivateAttr(default=None)

    @property
    def read_note(self) -> str | None:
        return self._read_note

    def unsealed_line(self) -> str | None:
        """The warning every rendering of an unsealed replay carries (None when it was sealed)."""
        if self.sealed is not False:
            return None
        return (
            "warning: replayed without the seal (--no-seal): connections and processes the agent "
            "started were not checked, so a tool body may have reached the outside world"
        )

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
        served = [r.model for r in self.results if r.model is not None]
        if not served:
            return None
        clean = [m for m in served if m.drift is None and m.unservable is None]
        parts = [f"{sum(m.served > 0 for m in clean)} served from the recording"]
        unasked = sum(m.served == 0 for m in clean)
        if unasked:  # a model call the recording never saw: a framework harvester does not serve, or none made
            parts.append(f"{unasked} never asked it")
        drifted = [m.drift for m in served if m.drift is not None]
        if drifted:
            why: dict[str, int] = {}
            for d in drifted:
                for w in d.what:
                    why[w] = why.get(w, 0) + 1
            causes = ", ".join(w if len(why) == 1 else f"{w} {n}" for w, n in why.items())
            parts.append(f"{len(drifted)} drifted ({causes})")
        unservable = sum(m.unservable is not None for m in served)
        if unservable:
            parts.append(f"{unservable} without a servable recording")
        live = sum(m.live_from is not None for m in served)
        if live:
            parts.append(f"{live} continued live")
        steps = sum(m.served for m in served)
        return (
            f"model {self.model or served[0].mode}: "
            + ", ".join(parts)
            + (f"; usage and cost of {steps} served step{'s' * (steps != 1)} as recorded" if steps else "")
        )

    # -- metrics -----------------------------------------------------------------------------
    @property
    def cases(self) -> list[CaseResult]:
        """The suite's own cases the replay could evaluate: every result but the failure-injection
        variants (``recovery()`` has those) and the errored ones (``errored`` counts those)."""
        return [r for r in self.results if r.variant_of is None and not r.errored]

    @property
    def errored(self) -> list[CaseResult]:
        """Results the harness could not evaluate (no agent built, a framework left unguarded)."""
        return [r for r in self.results if r.errored]

    @property
    def variants(self) -> list[CaseResult]:
        return [r for r in self.results if r.variant_of is not None]

    @property
    def passed(self) -> int:
        """Cases that passed (variants are counted by ``recovery()`` and the ``recovery`` line)."""
        return sum(r.passed for r in self.cases)

    @property
    def pass_rate(self) -> float:
        cases = self.cases
        return self.passed / len(cases) if cases else 0.0

    @property
    def mean_steps(self) -> float:
        cases = self.cases
        return sum(r.steps for r in cases) / len(cases) if cases else 0.0

    @property
    def total_cost(self) -> float:
        """The cases' cost (every trial); injected-failure variants are priced in their own report lines."""
        return sum((r.cost or 0.0) * r.trials for r in self.cases)

    def cost_text(self) -> str:
        """The total cost of the cases whose cost is known, saying how many are not; "n/a" when none is
        (no token prices configured, or the spans held no token counts)."""
        unknown = sum(r.cost is None for r in self.cases)
        if unknown == len(self.cases):
            return "n/a"
        return f"{self.total_cost:.6f}" + (f" ({unknown} case{'s' * (unknown != 1)} n/a)" if unknown else "")

    def by_tag(self) -> dict[str, float]:
        """Pass rate per tag, sorted by tag: where an aggregate hides compensating movement.

        Variants carry only ``recovery`` and ``recovery/<mode>``, so a case tag counts cases only.
        """
        return by_tag(self.results)

    def metrics(self, tag: str | None = None) -> dict[str, float | None]:
        if tag is not None:
            return metrics_of([r for r in self.results if tag in r.tags])
        return metrics_of(self.results, refused=self.refused)

    def pass_hat_k(self, tag: str | None = None) -> dict[int, float]:
        """pass^k, k = 1..trials (tau-bench's estimator), over the suite's cases or one tag's."""
        results = self.results if tag is None else [r for r in self.results if tag in r.tags]
        return pass_hat_k(results, self.trials)

    def pass_hat_k_by_tag(self) -> dict[str, dict[int, float]]:
        return {tag: self.pass_hat_k(tag) for tag in self.by_tag()}

    def headline(self) -> str:
        """``9/12 passed  (75%)``; with trials, "passed every trial" and the mean pass rate, labelled."""
        n = len(self.cases)
        errored = f"   {len(self.errored)} errored" if self.errored else ""
        if self.trials <= 1:
            return f"{self.passed}/{n} passed  ({self.pass_rate:.0%}){errored}"
        mean = sum(r.pass_rate for r in self.cases) / n if n else 0.0
        return f"{self.passed}/{n} passed every trial  ({self.pass_rate:.0%})   mean pass rate {mean:.0%}{errored}"

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

    def differing(self) -> list[tuple[CaseResult, str]]:
        """Every result whose replay made no_fixture calls or left the recorded path, passing or not."""
        out = []
        for r in self.results:
            text = r.differences()
            if text:
                out.append((r, text))
        return out

    def recovery_line(self) -> str:
        rate = self.metrics()["recovery_rate"] or 0.0
        return f"recovery {rate:.0%}: " + "  ".join(f"{m}={v:.0%}" for m, v in self.recovery()["by_mode"].items())

    def to_junit(self) -> bytes:
        return render.junit(self)

    def to_markdown(self, outcome: GateOutcome | None = None) -> str:
        return render.markdown(self, outcome)

    # -- files -------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        """The report, and its pass^k (by tag too) for whoever reads the file: derived, recomputed on load."""
        data = self.model_dump(mode="json", by_alias=True)
        if self.trials > 1:
            data[DERIVED] = {"suite": self.pass_hat_k(), "by_tag": self.pass_hat_k_by_tag()}
        return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically (a temporary sibling, then a rename); ``OutputError`` when it cannot."""
        write_file(path, self.to_json(), atomic=True)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        p = Path(path)
        try:
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
            report._read_note = (
                f"{file or 'the baseline'} has no trial counts (a report from before trials): read as "
                f"{report.trials} trial per case, passes = trials if the case passed, else 0"
                if report.trials == 1
                else f"{file or 'the baseline'} has no per-case pass counts: read as every trial passed or "
                "every trial failed, as each case's verdict says"
            )
        return report


_Model = TypeVar("_Model", Report, CaseResult)


def redacted(model: _Model, redactor: Redactor | None) -> _Model:
    """A report (or one case's result) with ``redactor`` applied to every string in it, itself when that
    changes nothing: an agent that echoes a secret, or a check quoting it, must not carry it into a file,
    a log or a test report."""
    if redactor is None:
        return model
    plain = model.model_dump(mode="json", by_alias=True)
    data = redactor.redact_value(plain)
    if data == plain:
        return model
    return Report.from_data(data) if isinstance(model, Report) else CaseResult.model_validate(data)
