"""Reports: what a replay saw, per case and in aggregate, saved as JSON so a baseline lives in the repo.

``regressed_against`` is the question a release gate asks: which cases passed before and fail now.
A new pass is an improvement, never a regression. With trials a single flaky failure must not block a
release, so a drop only counts when a one-sided Fisher exact test says it is unlikely to be noise;
smaller drops are listed as "changed, not significant" so nobody loses sight of them.

Gates live here too (they read nothing but reports): ``task_completion>=0.85``, ``tag:security>=1.0``,
``delta:task_completion>=-0.03``; ``unauthorised_actions<=0`` is always on, and a regression against
the baseline fails the gate by default. Renderers: terminal summary, JSON (the next baseline), JUnit
XML and Markdown (a CI job summary).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .canonical import canonical_json
from .errors import GateError, OutputError, ReportFormatError, pydantic_field

SCHEMA = "harvester.report/1"
ALPHA = 0.05
SUMMARY_FAILURES = 10  # failing cases the terminal summary details; the files list every one


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckResult(_Strict):
    name: str
    passed: bool
    detail: str


class Divergence(_Strict):
    """Where the replayed trajectory first left the recorded one (``step`` is 1-based; None = ran out)."""

    step: int
    recorded: Optional[str] = None
    actual: Optional[str] = None

    def describe(self) -> str:
        return f"diverged at step {self.step}: recorded {self.recorded or '(end)'}, actual {self.actual or '(end)'}"


class Injected(_Strict):
    tool: str
    mode: str


class NoFixtureCall(_Strict):
    """A call the recording could not answer: the tool, the reason code, and (``no_match``) the argument
    paths where the closest recorded call differs."""

    tool: str
    reason: str
    differs: list[str] = Field(default_factory=list)
    args: Any = None  # what the agent sent
    closest: Any = None  # the args of the closest recorded call of that tool, if it has any

    def describe(self) -> str:
        differs = f", differs at {', '.join(self.differs)}" if self.differs else ""
        return f"{self.tool}: {self.reason}{differs}"

    def explain(self) -> str:
        """One line for a person: the call, why nothing answered it, and what was recorded instead."""
        sent = f"{self.tool}({canonical_json(self.args)})" if self.args is not None else self.tool
        recorded = f"; recorded: {self.tool}({canonical_json(self.closest)})" if self.closest is not None else ""
        differs = f", differs at {', '.join(self.differs)}" if self.differs else ""
        return f"{sent}: {self.reason}{differs}{recorded}"


MAX_NO_FIXTURE_CALLS = 5  # per case, in the report; ``no_fixture`` counts them all
SUMMARY_DIFFERS = 10  # cases the summary lists as differing from their recording


class CaseResult(_Strict):
    """One case. With trials, the run fields describe the representative trial (the first failing one,
    else the last); ``passes``/``trials`` and ``unauthorised`` cover every trial."""

    id: str
    passed: bool  # every trial passed (pass^k)
    tags: list[str] = Field(default_factory=list)
    why: str = ""
    checks: list[CheckResult] = Field(default_factory=list)
    error: Optional[str] = None  # the agent raised or hung: "<Type>: <message>"
    stop: str = "unknown"
    answer: Optional[str] = None
    trajectory: list[str] = Field(default_factory=list)
    requested: list[str] = Field(default_factory=list)
    steps: int = 0
    cost: Optional[float] = None  # mean over the trials whose cost is known
    duration_ms: float = 0.0
    trials: int = 1
    passes: Optional[int] = None
    divergence: Optional[Divergence] = None
    no_fixture: int = 0
    tool_calls: int = 0  # calls that reached the executor
    redundant_calls: int = 0
    unauthorised: int = 0  # forbidden tool calls that executed, summed over trials
    live_calls: int = 0  # tool calls that ran (or tried to) outside the executor, summed over trials
    notes: list[str] = Field(default_factory=list)  # what the replay could not do as recorded (hosted tools)
    abstained: bool = False
    variant_of: Optional[str] = None
    injected: Optional[Injected] = None
    no_fixture_calls: list[NoFixtureCall] = Field(default_factory=list)  # the first MAX_NO_FIXTURE_CALLS

    @model_validator(mode="after")
    def _default_passes(self) -> "CaseResult":
        if self.passes is None:  # reports written before trials existed
            self.passes = self.trials if self.passed else 0
        return self

    @property
    def pass_rate(self) -> float:
        return (self.passes or 0) / self.trials if self.trials else 0.0

    @property
    def flaky(self) -> bool:
        return 0 < (self.passes or 0) < self.trials

    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def differences(self) -> Optional[str]:
        """How the replay left its recording, on one line (None when it did not): no_fixture calls, then
        the divergence. A variant's divergence is its injected failure at work, so only its calls count."""
        parts = []
        if self.no_fixture:
            shown = self.no_fixture_calls[:3]
            more = "; ..." if self.no_fixture > len(shown) else ""
            detail = f" ({'; '.join(c.describe() for c in shown)}{more})" if shown else ""
            parts.append(f"{self.no_fixture} no_fixture call{'s' if self.no_fixture != 1 else ''}{detail}")
        if self.divergence is not None and self.variant_of is None:
            parts.append(self.divergence.describe())
        return "; ".join(parts) or None

    def reasons(self) -> list[str]:
        """Why it failed, one line each: the agent error, then the failed checks."""
        out = [f"agent error: {self.error}"] if self.error else []
        out.extend(f"{c.name}: {c.detail}" for c in self.failed_checks())
        return out


METRICS: tuple[str, ...] = ("task_completion", "unauthorised_actions", "live_tool_calls", "recovery_rate",
                            "redundant_call_rate", "cost_per_success", "abstention_rate", "divergence_rate")


def _by_tag(results: Iterable[CaseResult]) -> dict[str, float]:
    totals: dict[str, list[float]] = {}
    for r in results:
        for tag in r.tags:
            t = totals.setdefault(tag, [0.0, 0])
            t[0] += r.pass_rate
            t[1] += 1
    return {tag: p / n for tag, (p, n) in sorted(totals.items())}


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def metrics_of(results: Sequence[CaseResult]) -> dict[str, Optional[float]]:
    """The release metrics over some results. ``None`` = no data (no variants, no known cost)."""
    tasks = [r for r in results if r.variant_of is None]
    variants = [r for r in results if r.variant_of is not None]
    calls = sum(r.tool_calls for r in results)
    costs = [r.cost * r.trials for r in tasks if r.cost is not None]
    successes = sum(r.passes or 0 for r in tasks)
    return {
        "task_completion": _mean([r.pass_rate for r in tasks]),
        "unauthorised_actions": float(sum(r.unauthorised for r in results)),
        "live_tool_calls": float(sum(r.live_calls for r in results)),
        "recovery_rate": _mean([r.pass_rate for r in variants]),
        "redundant_call_rate": sum(r.redundant_calls for r in results) / calls if calls else 0.0,
        "cost_per_success": sum(costs) / successes if costs and successes else None,
        "abstention_rate": _mean([float(r.abstained) for r in tasks]),
        "divergence_rate": _mean([float(r.divergence is not None or r.no_fixture > 0) for r in tasks]),
    }


def fisher_drop_p(base_pass: int, base_fail: int, now_pass: int, now_fail: int) -> float:
    """One-sided Fisher exact p: the chance of the baseline doing at least this much better than now if
    both had the same pass rate (hypergeometric tail, exact integer sums)."""
    n_base = base_pass + base_fail
    total = n_base + now_pass + now_fail
    passes = base_pass + now_pass
    tail = sum(math.comb(passes, x) * math.comb(total - passes, n_base - x)
               for x in range(base_pass, min(passes, n_base) + 1))
    return tail / math.comb(total, n_base)


@dataclass
class Comparison:
    """This report against a baseline: what regressed, what moved without significance, what improved."""

    regressed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # dropped, not significantly (trials)
    improved: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # in the baseline, not run now
    added: list[str] = field(default_factory=list)
    deltas: dict[str, tuple[Optional[float], Optional[float]]] = field(default_factory=dict)  # before, now
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"regressed": self.regressed, "changed_not_significant": self.changed, "improved": self.improved,
                "missing": self.missing, "added": self.added, "warnings": self.warnings,
                "metrics": {m: {"baseline": b, "current": n, "delta": _delta(b, n)} for m, (b, n) in self.deltas.items()}}

    def lines(self) -> list[str]:
        out = [f"warning: {w}" for w in self.warnings]
        out.append(f"regressed: {self.regressed}")
        if self.changed:
            out.append(f"changed, not significant: {self.changed}")
        if self.improved:
            out.append(f"improved: {self.improved}")
        for m, (b, n) in self.deltas.items():
            d = _delta(b, n)
            if d and abs(d) > 1e-9 * max(abs(b or 0.0), abs(n or 0.0), 1e-12):  # float noise is no change
                out.append(f"  {m}: {_fmt(b)} -> {_fmt(n)} ({d:+.4g})")
        return out


def _delta(before: Optional[float], now: Optional[float]) -> Optional[float]:
    return None if before is None or now is None else now - before


def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.4g}"


class Report(_Strict):
    schema_: str = Field(SCHEMA, alias="schema")
    suite: str = "suite"
    suite_version: Optional[str] = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    trials: int = 1
    shard: Optional[str] = None  # "i/n" when this report covers one shard
    results: list[CaseResult] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # -- metrics -----------------------------------------------------------------------------
    @property
    def cases(self) -> list[CaseResult]:
        """The suite's own cases: every result but the failure-injection variants (``recovery()`` has those)."""
        return [r for r in self.results if r.variant_of is None]

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

    def _cost_text(self) -> str:
        """The total cost, or "n/a" when no case's cost is known (no token prices configured)."""
        return f"{self.total_cost:.6f}" if any(r.cost is not None for r in self.cases) else "n/a"

    def by_tag(self) -> dict[str, float]:
        """Pass rate per tag, sorted by tag: where an aggregate hides compensating movement.

        Variants carry only ``recovery`` and ``recovery/<mode>``, so a case tag counts cases only.
        """
        return _by_tag(self.results)

    def metrics(self, tag: str | None = None) -> dict[str, Optional[float]]:
        return metrics_of(self.results if tag is None else [r for r in self.results if tag in r.tags])

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
    def compare(self, baseline: "Report", alpha: float = ALPHA) -> Comparison:
        out = Comparison()
        if (baseline.suite, baseline.suite_version) != (self.suite, self.suite_version):
            out.warnings.append(f"baseline is {baseline.suite} {baseline.suite_version or '(unversioned)'}, this run "
                                f"is {self.suite} {self.suite_version or '(unversioned)'}: comparing the cases "
                                "both ran")
        before = {r.id: r for r in baseline.results}
        now_ids = {r.id for r in self.results}
        for r in self.results:
            b = before.get(r.id)
            if b is None:
                out.added.append(r.id)
                continue
            if r.pass_rate < b.pass_rate:
                single = r.trials == 1 and b.trials == 1
                bp, np_ = b.passes or 0, r.passes or 0
                significant = single or fisher_drop_p(bp, b.trials - bp, np_, r.trials - np_) < alpha
                (out.regressed if significant else out.changed).append(r.id)
            elif r.passed and not b.passed:
                out.improved.append(r.id)
        out.missing = sorted(set(before) - now_ids)
        for lst in (out.regressed, out.changed, out.improved, out.added):
            lst.sort()
        shared = [r for r in self.results if r.id in before]
        mine, theirs = metrics_of(shared), metrics_of([before[r.id] for r in shared])
        out.deltas = {m: (theirs[m], mine[m]) for m in METRICS}
        return out

    def regressed_against(self, baseline: "Report") -> list[str]:
        """Ids that passed in ``baseline`` and fail now (with trials: significantly less often), sorted."""
        return self.compare(baseline).regressed

    def improved_against(self, baseline: "Report") -> list[str]:
        return self.compare(baseline).improved

    # -- rendering ---------------------------------------------------------------------------
    def summary(self) -> str:
        n = len(self.cases)
        lines = [
            f"{self.passed}/{n} passed  ({self.pass_rate:.0%})",
            f"mean steps {self.mean_steps:.1f}   total cost {self._cost_text()}",
        ]
        tags = _by_tag(self.cases)  # the variants' recovery tags have their own line below
        if tags:
            lines.append("by tag: " + "  ".join(f"{t}={rate:.0%}" for t, rate in tags.items()))
        if self.trials > 1:
            flaky = [r.id for r in self.results if r.flaky]
            lines.append(f"trials {self.trials}: pass^{self.trials} {self.passed}/{n}   flaky {flaky}")
        rec = self.recovery()
        if rec["by_mode"]:
            lines.append(self._recovery_line())
        failing = [r for r in self.results if not r.passed]
        for r in failing[:SUMMARY_FAILURES]:
            lines.append(f"FAIL {r.id}: {r.why}" if r.why else f"FAIL {r.id}")
            # a check that only restates the agent error ("stopped with error (<error>)") is left out here
            lines.extend(f"  - {reason}" for reason in r.reasons() if not (r.error and reason.endswith(f"({r.error})")))
            if r.trials > 1:
                lines.append(f"  - passed {r.passes}/{r.trials} trials")
        if len(failing) > SUMMARY_FAILURES:
            lines.append(f"... and {len(failing) - SUMMARY_FAILURES} more failing cases (all of them in --json, "
                         "--junit and --markdown)")
        differing = self.differing()
        if differing:
            lines.append("differs from the recording (passing or failing):")
            lines += [f"  ~ {r.id}: {text}" for r, text in differing[:SUMMARY_DIFFERS]]
            if len(differing) > SUMMARY_DIFFERS:
                lines.append(f"  ... and {len(differing) - SUMMARY_DIFFERS} more (every case in --json and --markdown)")
        return "\n".join(lines)

    def differing(self) -> list[tuple[CaseResult, str]]:
        """Every result whose replay made no_fixture calls or left the recorded path, passing or not."""
        out = []
        for r in self.results:
            text = r.differences()
            if text:
                out.append((r, text))
        return out

    def _recovery_line(self) -> str:
        rate = self.metrics()["recovery_rate"] or 0.0
        return f"recovery {rate:.0%}: " + "  ".join(f"{m}={v:.0%}" for m, v in self.recovery()["by_mode"].items())

    def to_junit(self) -> bytes:
        """JUnit XML: one testcase per case; failure text = the failed checks' details."""
        failures = sum(1 for r in self.results if not r.passed and not r.error)
        errors = sum(1 for r in self.results if r.error)
        suite = ET.Element("testsuite", name=self.suite, tests=str(len(self.results)), failures=str(failures),
                           errors=str(errors), skipped="0", timestamp=self.created_at,
                           time=f"{sum(r.duration_ms for r in self.results) / 1000:.3f}")
        for r in self.results:
            case = ET.SubElement(suite, "testcase", classname=_xml(self.suite), name=_xml(r.id),
                                 time=f"{r.duration_ms / 1000:.3f}")
            if not r.passed:
                reasons = r.reasons() or [f"passed {r.passes}/{r.trials} trials"]
                el = ET.SubElement(case, "error" if r.error else "failure", message=_xml(reasons[0])[:500],
                                   type=r.stop)
                el.text = _xml("\n".join(reasons + ([r.divergence.describe()] if r.divergence else [])))
            out = f"why: {r.why}\ntrajectory: {r.trajectory}\nstop: {r.stop}\nanswer: {r.answer or ''}"
            ET.SubElement(case, "system-out").text = _xml(out)
        root = ET.Element("testsuites", name="harvester", tests=suite.get("tests", "0"),
                          failures=str(failures), errors=str(errors))
        root.append(suite)
        return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"

    def to_markdown(self, outcome: "GateOutcome | None" = None) -> str:
        """A CI job summary: headline, metrics, gates, failing cases."""
        version = f" {self.suite_version}" if self.suite_version else ""
        lines = [f"## harvester replay: {self.suite}{version}", "",
                 f"**{self.passed}/{len(self.cases)} passed ({self.pass_rate:.0%})**, mean steps "
                 f"{self.mean_steps:.1f}, total cost {self._cost_text()}", ""]
        variants = self.variants
        if variants:
            lines += [f"{self._recovery_line()} ({sum(r.passed for r in variants)}/{len(variants)} "
                      "failure-injection variants passed)", ""]
        lines += ["| metric | value |", "| --- | --- |"]
        lines += [f"| {m} | {_fmt(v)} |" for m, v in self.metrics().items()]
        lines += [f"| tag:{t} | {v:.0%} |" for t, v in self.by_tag().items()]
        if outcome is not None:
            lines += ["", "| gate | result | value |", "| --- | --- | --- |"]
            lines += [f"| `{g.expr}` | {'pass' if g.passed else '**FAIL**'} | {g.detail} |" for g in outcome.gates]
            if outcome.comparison is not None:
                c = outcome.comparison
                lines += ["", f"Regressed: {', '.join(f'`{i}`' for i in c.regressed) or 'none'}"]
                if c.changed:
                    lines.append(f"Changed, not significant: {', '.join(f'`{i}`' for i in c.changed)}")
                lines += [f"> warning: {w}" for w in c.warnings]
        failing = [r for r in self.results if not r.passed]
        if failing:
            lines += ["", "### Failing cases", ""]
            for r in failing:
                lines.append(f"- **{_md(r.id)}**: {_md(r.why)}")
                lines += [f"  - {_md(reason)}" for reason in r.reasons()]
                if r.divergence is not None:
                    lines.append(f"  - {_md(r.divergence.describe())}")
        differing = self.differing()
        if differing:  # divergence is reported even when the checks pass
            lines += ["", "### Differs from the recording", ""]
            lines += [f"- ~ **{_md(r.id)}** ({'passed' if r.passed else 'failed'}): {_md(text)}"
                      for r, text in differing[:SUMMARY_DIFFERS]]
            if len(differing) > SUMMARY_DIFFERS:
                lines.append(f"- ... and {len(differing) - SUMMARY_DIFFERS} more (every case in the JSON report)")
        return "\n".join(lines) + "\n"

    # -- files -------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2) + b"\n"

    def save(self, path: str | Path) -> None:
        """Write the JSON atomically (a temporary sibling, then a rename); ``OutputError`` when it cannot."""
        write_file(path, self.to_json(), atomic=True)

    @classmethod
    def load(cls, path: str | Path) -> "Report":
        p = Path(path)
        try:
            data = orjson.loads(p.read_bytes())
        except FileNotFoundError:
            raise ReportFormatError("no such file", file=str(p)) from None
        except orjson.JSONDecodeError as exc:
            raise ReportFormatError(f"not JSON ({exc})", file=str(p)) from None
        return cls.from_data(data, file=str(p))

    @classmethod
    def from_data(cls, data: Any, *, file: str | None = None) -> "Report":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ReportFormatError(f"not a harvester report (expected schema {SCHEMA!r})", file=file, field="schema")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            field, msg = pydantic_field(exc)
            raise ReportFormatError(msg, file=file, field=field) from None


def check_output(path: str | Path) -> None:
    """Fail early (``OutputError``) on a path that can never be written: a directory, or under a file."""
    p = Path(path)
    if p.is_dir():
        raise OutputError("is a directory: give a file name (e.g. reports/run.json)", file=str(path))
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"cannot write under {parent}: not a directory", file=str(path))


def write_file(path: str | Path, data: bytes, *, atomic: bool = False) -> None:
    """Write ``data`` to ``path``, creating its folder; any failure is one ``OutputError`` naming the path.

    ``atomic``: through ``<name>.tmp`` and a rename, so a reader never sees half a report; the temporary
    file never outlives a failure. Without it the file is written in place (``/dev/stdout`` works).
    """
    check_output(path)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp") if atomic else p
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        if atomic:
            tmp.replace(p)
    except OSError as exc:
        if atomic and tmp.is_file():
            tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write ({exc.strerror or exc})", file=str(path)) from None


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str) -> str:
    """XML 1.0 cannot carry control characters at all, escaped or not: drop them."""
    return _XML_BAD.sub("", text)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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
    _check_shards([r.shard for r in reports])
    first = reports[0]
    seen: set[str] = set()
    results: list[CaseResult] = []
    for rep in reports:
        if (rep.suite, rep.suite_version) != (first.suite, first.suite_version):
            raise ReportFormatError(f"cannot merge suite {rep.suite} {rep.suite_version} into "
                                    f"{first.suite} {first.suite_version}")
        for r in rep.results:
            if r.id in seen:
                raise ReportFormatError(f"case {r.id!r} appears in two reports (overlapping shards?)")
            seen.add(r.id)
            results.append(r)
    return Report(suite=first.suite, suite_version=first.suite_version, trials=max(r.trials for r in reports),
                  results=results)


def _check_shards(shards: list[Optional[str]]) -> None:
    if all(s is None for s in shards):
        return
    if any(s is None for s in shards):
        raise ReportFormatError(f"cannot merge whole-suite reports with shard reports (shards: "
                                f"{', '.join(s or 'none' for s in shards)})")
    parsed: list[tuple[int, int]] = []
    for s in shards:
        i, _, n = (s or "").partition("/")
        if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
            raise ReportFormatError(f"shard {s!r} is not I/N", field="shard")
        parsed.append((int(i), int(n)))
    counts = sorted({n for _, n in parsed})
    if len(counts) > 1:
        raise ReportFormatError(f"cannot merge shards of different splits ({', '.join(sorted(set(shards)))})"  # type: ignore[arg-type]
                                ": every shard must come from the same --shard I/N run")
    n = counts[0]
    have = [i for i, _ in parsed]
    twice = sorted({i for i in have if have.count(i) > 1})
    if twice:
        raise ReportFormatError(f"shard {', '.join(f'{i}/{n}' for i in twice)} given more than once")
    missing = [i for i in range(1, n + 1) if i not in have]
    if missing:
        raise ReportFormatError(f"missing shard {', '.join(f'{i}/{n}' for i in missing)} (got "
                                f"{', '.join(f'{i}/{n}' for i in sorted(have))}): a shard that did not "
                                "finish must not pass the gate")


# -- gates ----------------------------------------------------------------------------------
DEFAULT_GATES: tuple[str, ...] = ("unauthorised_actions<=0", "live_tool_calls<=0")
_GATE = re.compile(r"^\s*(?P<delta>delta:)?(?P<metric>tag:[^\s<>=!]+|[a-z_]+)\s*(?P<op>>=|<=|==|>|<)"
                   r"\s*(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")
_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
        "<": lambda a, b: a < b, "==": lambda a, b: math.isclose(a, b, abs_tol=1e-9)}


@dataclass(frozen=True)
class Gate:
    expr: str
    metric: str  # a METRICS name or "tag:<name>"
    op: str
    value: float
    delta: bool = False

    def measure(self, report: Report) -> Optional[float]:
        if self.metric.startswith("tag:"):
            return report.by_tag().get(self.metric[4:])
        return report.metrics()[self.metric]


def parse_gate(expr: str) -> Gate:
    """``[delta:]metric OP number``; a typo must stop the job, not silently pass it."""
    m = _GATE.match(expr)
    if m is None:
        raise GateError(f"malformed gate {expr!r} (expected e.g. 'task_completion>=0.85', 'tag:security>=1.0', "
                        "'delta:task_completion>=-0.03')")
    metric = m["metric"]
    if not metric.startswith("tag:") and metric not in METRICS:
        raise GateError(f"unknown metric {metric!r} in gate {expr!r} (known: {', '.join(METRICS)}, tag:<name>)")
    value, delta = float(m["value"]), bool(m["delta"])
    if is_rate(metric):  # 85 for 85% would never pass (or always would): a typo must stop the job
        if delta and abs(value) > 1:
            raise GateError(f"gate {expr.strip()!r}: a change in {metric}, a rate, lies between -1 and 1 "
                            f"({value:g}% is {value / 100:g})")
        if not delta and not 0 <= value <= 1:
            example = f"{value:g}% is {value / 100:g}" if value > 1 else "e.g. 0.85 for 85%"
            raise GateError(f"gate {expr.strip()!r}: {metric} is a rate from 0 to 1 ({example})")
    return Gate(expr.strip(), metric, m["op"], value, delta)


RATES: frozenset[str] = frozenset({"task_completion", "recovery_rate", "redundant_call_rate", "abstention_rate",
                                   "divergence_rate"})


def is_rate(metric: str) -> bool:
    """A metric measured from 0 to 1: the rates and every ``tag:<name>`` pass rate."""
    return metric in RATES or metric.startswith("tag:")


@dataclass
class GateResult:
    expr: str
    passed: bool
    value: Optional[float]
    detail: str

    def line(self) -> str:
        return f"gate {self.expr}: {'ok' if self.passed else 'FAIL'} ({self.detail})"


@dataclass
class GateOutcome:
    gates: list[GateResult]
    regressions: list[str]
    comparison: Optional[Comparison] = None

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions or not all(g.passed for g in self.gates) else 0

    def lines(self) -> list[str]:
        out = self.comparison.lines() if self.comparison is not None else []
        return out + [g.line() for g in self.gates]

    def verdict(self) -> str:
        """The last line of a gated command: what its exit code means, so a failing job never ends on "ok"."""
        if self.exit_code == 0:
            return "release gate: PASS"
        why = []
        if self.regressions:
            why.append(f"{len(self.regressions)} case{'s' if len(self.regressions) != 1 else ''} regressed")
        failed = sum(not g.passed for g in self.gates)
        if failed:
            why.append(f"{failed} gate{'s' if failed != 1 else ''} failed")
        return f"release gate: FAIL ({', '.join(why)})"

    def warnings(self, report: Report) -> list[str]:
        """Failing cases a passing job would hide: once any gate is configured, failures alone do not fail it."""
        cases = report.cases
        failed = sum(not r.passed for r in cases)
        if self.exit_code != 0 or not failed:
            return []
        return [f"warning: {failed}/{len(cases)} case{'s' if len(cases) != 1 else ''} failed but no gate covers "
                "them (add --gate task_completion>=1)"]

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "regressions": self.regressions,
                "gates": [{"gate": g.expr, "passed": g.passed, "value": g.value, "detail": g.detail}
                          for g in self.gates],
                "comparison": self.comparison.to_json() if self.comparison is not None else None}


def evaluate_gates(report: Report, gates: Iterable[str] = (), baseline: Report | None = None) -> GateOutcome:
    """Every gate (plus the default ones) against ``report``; regressions against ``baseline`` fail too.

    A metric with no data (``recovery_rate`` without ``--inject``) fails its gate: a gate that cannot be
    measured protects nothing. In a shard's report it passes as "no data in shard": one shard of four
    may hold no ``security`` case, and the merged report judges the gate on the whole suite. A ``delta:`` gate without a baseline is a usage error.
    """
    parsed = [parse_gate(g) for g in gates]
    for default in DEFAULT_GATES:
        gate = parse_gate(default)
        if not any(p.metric == gate.metric and not p.delta for p in parsed):
            parsed.append(gate)
    comparison = report.compare(baseline) if baseline is not None else None
    shared_now = shared_before = None
    if baseline is not None:  # deltas over the cases both ran: another suite version adds and drops some
        before_ids, now_ids = {r.id for r in baseline.results}, {r.id for r in report.results}
        shared_now = report.model_copy(update={"results": [r for r in report.results if r.id in before_ids]})
        shared_before = baseline.model_copy(update={"results": [r for r in baseline.results if r.id in now_ids]})
    results = []
    for gate in parsed:
        if gate.delta:
            if shared_now is None or shared_before is None:
                raise GateError(f"gate {gate.expr!r} compares against a baseline: pass --baseline")
            value = _delta(gate.measure(shared_before), gate.measure(shared_now))
        else:
            value = gate.measure(report)
        if value is None:
            # One shard may hold no case of a tag: the merged report is where such a gate is judged.
            in_shard = report.shard is not None
            results.append(GateResult(gate.expr, in_shard, None, f"no data in shard {report.shard}" if in_shard
                                      else "no data"))
            continue
        passed = _OPS[gate.op](value, gate.value)
        results.append(GateResult(gate.expr, passed, value, f"{value:.4g}"))
    return GateOutcome(results, comparison.regressed if comparison else [], comparison)
