"""A report as people read it: the terminal summary, JUnit XML for CI, Markdown for a job summary."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from ._compare import failed_too_text
from ._inert import inert
from ._metrics import by_tag, fmt

if TYPE_CHECKING:
    from ._gates import GateOutcome
    from ._report import Report
    from ._results import CaseResult

__all__ = ["junit", "junit_chunks", "markdown", "summary"]

_T = TypeVar("_T")

SUMMARY_FAILURES = 10  # failing cases the terminal summary details; the files list every one
SUMMARY_DIFFERS = 10  # cases the summary lists as differing from their recording


def summary(report: Report) -> str:
    lines = [report.headline(), f"mean steps {report.mean_steps:.1f}   total cost {report.cost_text()}"]
    lines += report.unsealed_lines()
    for line in (report.model_line(), report.sandbox_line()):
        if line:
            lines.append(line)
    lines += report.judging_lines()
    tags = by_tag(report.cases)  # the variants' recovery tags have their own line below
    if tags:
        lines.append("by tag: " + "  ".join(f"{t}={rate:.0%}" for t, rate in tags.items()))
    if report.trials > 1:
        flaky = [r.id for r in report.results if r.flaky]
        lines.append(f"trials {report.trials}: {_pass_hat_k(report.pass_hat_k())}   flaky {flaky}")
    confirmed = [r.id for r in report.results if r.confirmation == "confirmed"]
    flaky_now = [r.id for r in report.results if r.confirmation == "flaky"]
    if confirmed or flaky_now:
        lines.append(
            f"confirm: {len(confirmed)} failed every rerun too {confirmed}   flaky (passed a rerun) {flaky_now}"
        )
    errored, n_errored = _first((r for r in report.results if r.errored), 3)
    if n_errored:
        shown = "; ".join(f"{r.id}: {_line(r.error or ', '.join(r.reasons()) or 'not evaluated')}" for r in errored)
        lines.append(f"errored {n_errored} (not evaluated, out of the pass rates): {shown}")
    rec = report.recovery()
    if rec["by_mode"]:
        lines.append(report.recovery_line())
    failing, n_failing = _first((r for r in report.results if not r.passed and not r.errored), SUMMARY_FAILURES)
    for r in failing:
        sure = " (confirmed: every rerun failed too)" if r.confirmation == "confirmed" else ""
        lines.append(f"FAIL {r.id}: {r.why}{sure}" if r.why else f"FAIL {r.id}{sure}")
        # a check that only restates the agent error ("stopped with error (<error>)") is left out here
        lines.extend(
            f"  - {_line(reason)}" for reason in r.reasons() if not (r.error and reason.endswith(f"({r.error})"))
        )
        if r.trials > 1:
            lines.append(f"  - passed {r.passes}/{r.trials} trials")
    if n_failing > SUMMARY_FAILURES:
        lines.append(
            f"... and {n_failing - SUMMARY_FAILURES} more failing cases (all of them in --json, --junit and --markdown)"
        )
    lines += report.note_lines()
    if report.refused:
        more = report.refused - len(report.refused_calls)
        named = "; ".join(report.refused_calls) + (f"; and {more} more" if more > 0 else "")
        plural = "s" if report.refused != 1 else ""
        lines.append(
            f"refused {report.refused} call{plural} made outside any case"
            + (f": {named}" if report.refused_calls else "")
        )
    unchecked, n_unchecked = _first(((r.id, c) for r in report.results for c in r.checks if c.passed is None), 5)
    if unchecked:
        lines.append(f"not checked ({n_unchecked}): " + "; ".join(f"{i}: {c.name}: {c.detail}" for i, c in unchecked))
    differing, n_differing = _first(report.differing(), SUMMARY_DIFFERS)
    if differing:
        lines.append("differs from the recording (passing or failing):")
        lines += [f"  ~ {r.id}: {text}" for r, text in differing]
        if n_differing > SUMMARY_DIFFERS:
            lines.append(f"  ... and {n_differing - SUMMARY_DIFFERS} more (every case in --json and --markdown)")
    return "\n".join(lines)


def _first(items: Iterable[_T], n: int) -> tuple[list[_T], int]:
    """The first ``n`` of ``items`` and how many there are: what a summary shows of a long list."""
    first: list[_T] = []
    count = 0
    for item in items:
        count += 1
        if count <= n:
            first.append(item)
    return first, count


def junit(report: Report) -> bytes:
    """JUnit XML: one testcase per case; failure text = the failed checks' details."""
    return b"".join(junit_chunks(report))


def junit_chunks(report: Report) -> Iterator[bytes]:
    """The JUnit XML as it is written, a testcase at a time: the suite's counts from a first pass over
    the results, each testcase from a second (a spool on disk is never held whole)."""
    tests = errors = failed = 0
    seconds = 0.0
    for r in report.results:
        tests, seconds = tests + 1, seconds + r.duration_ms / 1000
        errors += r.errored or bool(r.error and not r.passed)
        failed += not r.passed
    failures = failed - errors
    root = ET.Element("testsuites", name="harvester", tests=str(tests), failures=str(failures), errors=str(errors))
    suite = ET.SubElement(
        root,
        "testsuite",
        name=report.suite,
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        timestamp=report.created_at,
        time=f"{seconds:.3f}",
    )
    ET.SubElement(suite, "cases")  # where the testcases go: the frame is written around it
    head, _, tail = ET.tostring(root, encoding="utf-8", xml_declaration=True).partition(b"<cases />")
    yield head
    for r in report.results:
        yield ET.tostring(_testcase(report, r), encoding="utf-8")
    yield tail + b"\n"


def _testcase(report: Report, r: CaseResult) -> ET.Element:
    case = ET.Element("testcase", classname=_xml(report.suite), name=_xml(r.id), time=f"{r.duration_ms / 1000:.3f}")
    if not r.passed:
        # type: the failed check (or the agent's error type); message: what it saw
        failed = r.failed_checks()
        reasons = r.reasons() or [f"passed {r.passes}/{r.trials} trials"]
        if r.errored or r.error:  # the agent raised, or the harness could not run it: an <error>
            kind, message, tag = (r.error or "error").split(":", 1)[0], reasons[0], "error"
        else:
            first = (failed[0].name, failed[0].detail) if failed else ("trials", reasons[0])
            kind, message, tag = *first, "failure"
        el = ET.SubElement(case, tag, message=_xml(message)[:500], type=_xml(kind))
        el.text = _xml("\n".join(reasons + ([r.divergence.summary()] if r.divergence else [])))
    out = f"why: {r.why}\ntrajectory: {r.trajectory}\nstop: {r.stop}\nanswer: {r.answer or ''}"
    ET.SubElement(case, "system-out").text = _xml(out)
    return case


def markdown(report: Report, outcome: GateOutcome | None = None) -> str:
    """A CI job summary: headline, metrics, gates, failing cases. Every string from a case, a check, the
    agent or a file passes through ``inert`` (it renders as the characters it holds, never as Markdown)."""
    version = f" {report.suite_version}" if report.suite_version else ""
    lines = [
        f"## harvester replay: {inert(report.suite + version)}",
        "",
        f"**{report.headline()}**, mean steps {report.mean_steps:.1f}, total cost {report.cost_text()}",
        "",
    ]
    for warning in report.unsealed_lines():
        lines += [f"> **{warning}**", ""]
    for line in (report.model_line(), report.sandbox_line()):
        if line:
            lines += [inert(line), ""]
    lines += [f"{inert(line)}\n" for line in report.judging_lines()]
    if report.trials > 1:
        lines += [f"{_pass_hat_k(report.pass_hat_k())}", ""]
        lines += ["| tag | " + " | ".join(f"pass^{k}" for k in range(1, report.trials + 1)) + " |"]
        lines += ["| --- |" + " --- |" * report.trials]
        for tag, by_k in report.pass_hat_k_by_tag().items():
            lines.append(
                f"| {inert(tag)} | "
                + " | ".join(f"{by_k[k]:.0%}" if k in by_k else "n/a" for k in range(1, report.trials + 1))
                + " |"
            )
        lines.append("")
    n_variants = passed = 0
    for r in report.results:
        if r.variant_of is not None:
            n_variants, passed = n_variants + 1, passed + r.passed
    if n_variants:
        lines += [f"{inert(report.recovery_line())} ({passed}/{n_variants} failure-injection variants passed)", ""]
    lines += ["| metric | value |", "| --- | --- |"]
    lines += [f"| {m} | {fmt(v)} |" for m, v in report.metrics().items()]
    lines += [f"| tag:{inert(t)} | {v:.0%} |" for t, v in report.by_tag().items()]
    if outcome is not None:
        lines += ["", f"**{inert(outcome.summary())}**", "", "| gate | result | value |", "| --- | --- | --- |"]
        lines += [
            f"| {inert(g.label)} | {'pass' if g.passed else '**FAIL**'} | {inert(g.detail)} |" for g in outcome.gates
        ]
        if outcome.comparison is not None:
            c = outcome.comparison
            lines += ["", f"Regressed: {_ids(c.regressed)}"]
            if c.failed_too:
                lines += ["", f"{failed_too_text(len(c.failed_too))}: {_ids(c.failed_too)}", ""]
            if c.inconclusive:
                lines += [f"Inconclusive: {inert(i)} ({inert(c.decides.get(i, ''))})" for i in c.inconclusive]
            if c.changed:
                lines.append(f"Changed, not significant: {_ids(c.changed)}")
            if c.pass_to_fail or c.fail_to_pass:
                lines.append(f"Flips: pass -> fail {_ids(c.pass_to_fail)}; fail -> pass {_ids(c.fail_to_pass)}")
            lines += [f"Steps: {inert(i)} {b} -> {n}" for i, (b, n) in c.steps.items()]
            lines += [f"> warning: {inert(w)}" for w in c.warnings]
    heading = ["", "### Failing cases", ""]
    for r in report.results:
        if r.passed:
            continue
        lines += heading
        heading = []
        lines.append(f"- **{inert(r.id)}**: {inert(r.why)}")
        lines += [f"  - {inert(reason)}" for reason in r.reasons()]
        if r.divergence is not None:
            lines.append(f"  - {inert(r.divergence.summary())}")
    notes = report.note_lines()
    if notes:
        lines += ["", "### Notes", "", *(f"- {inert(n)}" for n in notes)]
    differing, n_differing = _first(report.differing(), SUMMARY_DIFFERS)
    if differing:  # divergence is reported even when the checks pass
        lines += ["", "### Differs from the recording", ""]
        lines += [f"- ~ **{inert(r.id)}** ({'passed' if r.passed else 'failed'}): {inert(t)}" for r, t in differing]
        if n_differing > SUMMARY_DIFFERS:
            lines.append(f"- ... and {n_differing - SUMMARY_DIFFERS} more (every case in the JSON report)")
    return "\n".join(lines) + "\n"


def _ids(ids: list[str]) -> str:
    """Case ids in a sentence: ``a, b`` (each inert), or ``none``."""
    return ", ".join(inert(i) for i in ids) or "none"


def _pass_hat_k(by_k: dict[int, float]) -> str:
    """``pass^1 81%  pass^2 70%``: how often it gets a case right k times in a row (tau-bench)."""
    return "  ".join(f"pass^{k} {v:.0%}" for k, v in by_k.items())


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str) -> str:
    """XML 1.0 cannot carry control characters at all, escaped or not: drop them."""
    return _XML_BAD.sub("", text)


def _line(text: str) -> str:
    """A reason or an error on one terminal line: an exception's text may hold line breaks."""
    return " ".join(text.split())
