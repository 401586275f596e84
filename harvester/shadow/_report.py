"""A shadow report: how a candidate behaved on stored production runs, as tallies (overall, per agent,
per failure kind, per tool path), the changed runs worst first, and the five lines a release manager reads.

Shard reports merge by addition (``merge``), as replay's do: every shard exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._files import write_file
from ..errors import ReportFormatError, pydantic_field
from ..report import CaseResult, GateResult, check_shards
from ._change import RunChange
from ._tally import Tally

__all__ = ["GROUPS", "SCHEMA", "ShadowReport", "is_shadow_report", "merge"]

SCHEMA = "harvester.shadow/1"
GROUPS: tuple[str, ...] = ("agent", "failure_kind", "tool_path")  # the scopes a run is tallied in besides overall
MAX_DETAILED = 200  # changed runs whose replay the report keeps whole (the worst first) for the HTML page
LISTED = 10  # newly mutating runs the terminal names


class ShadowReport(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(SCHEMA, alias="schema")
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    candidate: str = ""
    since: str | None = None
    shard: str | None = None
    sealed: bool = True
    model: str = "live"
    skipped: int = 0  # runs with no prompt: nothing to ask the candidate
    refused: int = 0  # calls refused outside any run's replay (the replay runner's count)
    total: Tally = Field(default_factory=Tally)
    groups: dict[str, dict[str, Tally]] = Field(default_factory=lambda: {g: dict[str, Tally]() for g in GROUPS})
    changes: list[RunChange] = Field(default_factory=list)  # every changed run, worst first once sorted
    details: list[CaseResult] = Field(default_factory=list)  # the replays of the worst MAX_DETAILED of them
    proposed: list[str] = Field(default_factory=list)  # pending case ids ``--propose`` wrote
    # ``--sandbox``: the calls each sandbox tool made for real (None without --sandbox).
    sandbox: dict[str, int] | None = None

    def add(self, change: RunChange, result: CaseResult, path: str) -> None:
        """Count one shadowed run; keep it (and, among the worst, its replay) when it changed."""
        self.total.add(change)
        if self.sandbox is not None:
            for call in result.sandboxed:
                self.sandbox[call.tool] = self.sandbox.get(call.tool, 0) + 1
        for group, key in zip(GROUPS, (change.agent or "(unknown)", change.kind[0] or "ok", path)):
            self.groups[group].setdefault(key, Tally()).add(change)
        if not change.changed:
            return
        self.changes.append(change)
        detail = result.model_copy(update={"tags": change.flags(), "why": change.why()})
        if len(self.details) < MAX_DETAILED:
            self.details.append(detail)
        elif change.worse:  # a worse run displaces one that only changed
            mild = next((i for i, d in enumerate(self.details) if not _worse_tags(d.tags)), None)
            if mild is not None:
                self.details[mild] = detail

    def finish(self) -> ShadowReport:
        """The changed runs in reading order: newly mutating, then newly failed, then the rest."""
        self.changes.sort(key=lambda c: (not c.new_mutating, not c.newly_failed, c.id))
        self.details.sort(key=lambda d: ("new_mutating" not in d.tags, "newly_failed" not in d.tags, d.id))
        return self

    def metrics(self) -> dict[str, float | None]:
        return self.total.metrics()

    def summary_lines(self) -> list[str]:
        """Five lines: newly mutating (always first), runs, same, newly failed, cost."""
        t = self.total
        mutating = [c for c in self.changes if c.new_mutating]
        tools = sorted({tool for c in mutating for tool in c.new_mutating})
        since = f" since {self.since}" if self.since else ""
        shard = f" (shard {self.shard})" if self.shard else ""
        seal = "sealed" if self.sealed else "UNSEALED"
        skipped = f"; {self.skipped} skipped (no prompt)" if self.skipped else ""
        if self.sandbox is not None:
            ran = ", ".join(f"{tool} ({n})" for tool, n in sorted(self.sandbox.items())) or "nothing"
            skipped += f"; sandbox ran for real: {ran}"
        return [
            f"newly mutating: {t.rate_text('new_mutating')} called a mutating tool more often than production did"
            + (f" ({', '.join(tools)})" if tools else ""),
            f"runs: {t.runs} production runs{since}{shard} shadowed with {self.candidate or 'the candidate'} "
            f"({seal}, model {self.model}){skipped}",
            f"same: {t.rate_text('same')}; changed {t.count('changed')}: diverged {t.count('diverged')}, answer "
            f"{t.count('answer_changed')}, new calls {t.count('new_calls')}, args {t.count('args_changed')}",
            f"newly failed: {t.rate_text('newly_failed')}; fixed {t.count('fixed')}" + self._harness_text(),
            self._cost_line(),
        ]

    def _harness_text(self) -> str:
        """What went wrong around the agent, when anything did (none of it is the candidate's behaviour)."""
        t = self.total
        parts = [
            f"{t.count('errored')} not evaluated (errored)" if t.count("errored") else "",
            f"{t.count('live_tool_calls')} with a live call (a tool run around the executor, or a refusal)"
            if t.count("live_tool_calls")
            else "",
            f"{self.refused} call(s) refused outside any run" if self.refused else "",
        ]
        return "".join(f"; {p}" for p in parts if p)

    def warnings(self) -> list[str]:
        """What makes the figures hard to read: several agents' runs shadowed with one candidate."""
        agents = sorted(self.groups.get("agent", {}))
        if len(agents) > 1:
            return [f"runs of {len(agents)} agents ({', '.join(agents)}) shadowed with one candidate: "
                    "pass --agent-filter to compare the candidate with its own agent's runs"]  # fmt: skip
        return []

    def _cost_line(self) -> str:
        t, m = self.total, self.total.metrics()
        steps = f"steps {m['mean_steps_delta']:+.2f}/run" if m["mean_steps_delta"] is not None else "steps n/a"
        tokens = f"tokens {m['mean_tokens_delta']:+.0f}/run" if m["mean_tokens_delta"] is not None else "tokens n/a"
        if not t.cost_known:
            return f"cost: unknown (no price or token counts); {tokens}, {steps}"
        before, after = t.cost_production, t.cost_candidate
        change = after - before if abs(after - before) > 1e-9 * max(before, 1e-9) else 0.0  # summing order's noise
        pct = f", {change / before:+.1%}" if before else ""
        return f"cost: production ${before:.4f}, candidate ${after:.4f} ({change:+.4f}{pct}); {tokens}, {steps}"

    def mutating_lines(self, limit: int = LISTED) -> list[str]:
        """The newly mutating runs, one line each (the first ``limit``)."""
        mutating = [c for c in self.changes if c.new_mutating]
        out = [f"  {c.id}: {', '.join(c.new_mutating)} ({c.agent or 'agent'}: {c.prompt[:60]!r})" for c in mutating]
        return out[:limit] + ([f"  ... and {len(out) - limit} more (see the report)"] if len(out) > limit else [])

    def redacted(self, redactor: Any) -> ShadowReport:
        """The report with ``redactor`` (a ``harvester.redact.Redactor``) applied to every string but the
        runs' ids: a trace id's digits can look like a card number, and an id is never a secret."""
        plain = self.model_dump(mode="json", by_alias=True)
        data = redactor.redact_value(plain)
        if data == plain:
            return self
        for now, was in zip(data["changes"], plain["changes"]):
            now.update(id=was["id"], trace_id=was["trace_id"], run_id=was["run_id"])
        for now, was in zip(data["details"], plain["details"]):
            now["id"] = was["id"]
        data["proposed"] = plain["proposed"]
        return ShadowReport.from_data(data)

    def to_markdown(self, gates: list[GateResult] | None = None) -> str:
        """The five lines, the newly mutating runs and the gates, for a job summary or a pull request."""
        failed = [g for g in gates or () if not g.passed]
        verdict = "FAIL" if failed else "PASS" if gates else "no gate set"
        out = [f"## harvester shadow: {self.candidate}", "", f"**{verdict}**", ""]
        out += [f"- {line}" for line in self.summary_lines()]
        mutating = self.mutating_lines()
        if mutating:
            out += ["", "Newly mutating runs:", "", *(f"- `{line.strip()}`" for line in mutating)]
        if gates:
            out += ["", "| gate | result | value |", "| --- | --- | --- |"]
            out += [f"| `{g.expr}` | {'pass' if g.passed else '**FAIL**'} | {g.detail} |" for g in gates]
        return "\n".join(out) + "\n"

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2) + b"\n"

    def save(self, path: str | Path) -> None:
        write_file(path, self.to_json(), atomic=True)

    @classmethod
    def from_data(cls, data: Any, *, file: str | None = None) -> ShadowReport:
        if not is_shadow_report(data):
            raise ReportFormatError(f"not a shadow report (expected schema {SCHEMA!r})", file=file, field="schema")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            field, msg = pydantic_field(exc)
            raise ReportFormatError(msg, file=file, field=field) from None


def is_shadow_report(data: Any) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def _worse_tags(tags: list[str]) -> bool:
    return "new_mutating" in tags or "newly_failed" in tags


def merge(reports: Iterable[ShadowReport]) -> ShadowReport:
    """One report from shard reports of one shadow run: every shard exactly once, no run twice."""
    reports = list(reports)
    if not reports:
        raise ReportFormatError("nothing to merge")
    check_shards([r.shard for r in reports])
    first = reports[0]
    out = ShadowReport(
        candidate=first.candidate, since=first.since, sealed=all(r.sealed for r in reports), model=first.model
    )
    seen: set[str] = set()
    for rep in reports:
        out.skipped += rep.skipped
        out.refused += rep.refused
        out.total.merge(rep.total)
        for group, tallies in rep.groups.items():
            for key, tally in tallies.items():
                out.groups.setdefault(group, {}).setdefault(key, Tally()).merge(tally)
        for change in rep.changes:
            if change.id in seen:
                raise ReportFormatError(f"run {change.id!r} appears in two reports (overlapping shards?)")
            seen.add(change.id)
        out.changes += rep.changes
        out.details += rep.details
        out.proposed += rep.proposed
        if rep.sandbox is not None:
            out.sandbox = out.sandbox or {}
            for tool, n in rep.sandbox.items():
                out.sandbox[tool] = out.sandbox.get(tool, 0) + n
    out.details = sorted(out.details, key=lambda d: (not _worse_tags(d.tags), d.id))[:MAX_DETAILED]
    return out.finish()
