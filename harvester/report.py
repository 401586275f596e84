"""Reports: what a replay saw, per case and in aggregate, saved as JSON so a baseline lives in the repo.

``regressed_against`` is the question a release gate asks: which cases passed before and fail now.
A new pass is an improvement, never a regression.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ReportFormatError, pydantic_field

SCHEMA = "harvester.report/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckResult(_Strict):
    name: str
    passed: bool
    detail: str


class CaseResult(_Strict):
    id: str
    passed: bool
    tags: list[str] = Field(default_factory=list)
    why: str = ""
    checks: list[CheckResult] = Field(default_factory=list)
    error: Optional[str] = None  # the agent raised or hung: "<Type>: <message>"
    stop: str = "unknown"
    answer: Optional[str] = None
    trajectory: list[str] = Field(default_factory=list)
    requested: list[str] = Field(default_factory=list)
    steps: int = 0
    cost: Optional[float] = None
    duration_ms: float = 0.0

    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]


class Report(_Strict):
    schema_: str = Field(SCHEMA, alias="schema")
    suite: str = "suite"
    suite_version: Optional[str] = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    results: list[CaseResult] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # -- metrics -----------------------------------------------------------------------------
    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.results) if self.results else 0.0

    @property
    def mean_steps(self) -> float:
        return sum(r.steps for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def total_cost(self) -> float:
        return sum(r.cost or 0.0 for r in self.results)

    def by_tag(self) -> dict[str, float]:
        """Pass rate per tag, sorted by tag: where an aggregate hides compensating movement."""
        totals: dict[str, list[int]] = {}
        for r in self.results:
            for tag in r.tags:
                t = totals.setdefault(tag, [0, 0])
                t[0] += r.passed
                t[1] += 1
        return {tag: p / n for tag, (p, n) in sorted(totals.items())}

    def result(self, case_id: str) -> CaseResult | None:
        return next((r for r in self.results if r.id == case_id), None)

    def regressed_against(self, baseline: "Report") -> list[str]:
        """Ids that passed in ``baseline`` and fail now, sorted."""
        before = {r.id: r.passed for r in baseline.results}
        return sorted(r.id for r in self.results if not r.passed and before.get(r.id) is True)

    def improved_against(self, baseline: "Report") -> list[str]:
        before = {r.id: r.passed for r in baseline.results}
        return sorted(r.id for r in self.results if r.passed and before.get(r.id) is False)

    # -- rendering ---------------------------------------------------------------------------
    def summary(self) -> str:
        n = len(self.results)
        lines = [
            f"{self.passed}/{n} passed  ({self.pass_rate:.0%})",
            f"mean steps {self.mean_steps:.1f}   total cost {self.total_cost:.6f}",
        ]
        tags = self.by_tag()
        if tags:
            lines.append("by tag: " + "  ".join(f"{t}={rate:.0%}" for t, rate in tags.items()))
        for r in self.results:
            if r.passed:
                continue
            lines.append(f"FAIL {r.id}: {r.why}" if r.why else f"FAIL {r.id}")
            if r.error:
                lines.append(f"  - agent error: {r.error}")
            for c in r.failed_checks():
                lines.append(f"  - {c.name}: {c.detail}")
        return "\n".join(lines)

    # -- files -------------------------------------------------------------------------------
    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2) + b"\n"

    def save(self, path: str | Path) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_bytes(self.to_json())
        tmp.replace(p)

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
