"""How far a judge can be trusted: its verdicts against human labels, and the record that says so.

A label says an answer is good or bad; the judge passes or fails it. "Positive" is pass/good, so a
**false pass** is a bad answer the judge passed (the one that lets a regression through) and a **false
fail** a good answer it failed. Figures:

- accuracy, and Cohen's kappa (agreement beyond what two raters with these pass rates reach by chance:
  ``(po - pe) / (1 - pe)``), with its large-sample 95% interval (``se = sqrt(po(1-po) / (n(1-pe)^2))``);
- the false-pass rate (of the bad answers) and the false-fail rate (of the good ones);
- every rate with a 95% Wilson score interval, which unlike ``p ± 1.96·se`` stays inside [0, 1] and
  keeps its width honest at the small counts a team labels (30 answers, 0 false passes is not 0%).

A judge is **calibrated** when kappa clears the floor on at least the floor's number of labels
(``[tool.harvester.calibration]``: ``min_kappa`` 0.6, ``min_labels`` 30 by default), and its config and
rubric are the ones calibrated (the calibration file keeps the judge's fingerprint: a changed rubric is
a new judge). A judge that passes everything scores kappa 0 however many answers are good; kappa is
undefined (None) when judge and labels all say the same one verdict (chance agreement is 1): such
labels cannot tell the judge from a constant, so it is not calibrated.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from .._files import write_file

__all__ = [
    "Agreement",
    "Disagreement",
    "calibration_problem",
    "read_calibrations",
    "save_calibration",
    "wilson",
]

Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for ``k`` successes in ``n`` (None when ``n`` is 0)."""
    if n == 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Disagreement:
    case: str
    answer: str
    human: str  # good | bad
    human_reason: str
    judge_reason: str


@dataclass
class Agreement:
    """The confusion table of a judge against labels: ``pass_good`` (both pass), ``pass_bad`` (false
    pass), ``fail_good`` (false fail), ``fail_bad`` (both fail); ``errors`` are labels it gave no verdict on."""

    judge: str
    fingerprint: str
    min_kappa: float
    min_labels: int
    pass_good: int = 0
    pass_bad: int = 0
    fail_good: int = 0
    fail_bad: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, case: str, answer: str, human: str, human_reason: str, passed: bool | None, reason: str) -> None:
        """One labelled answer and the judge's verdict on it (``passed`` None: it gave none, left out)."""
        if passed is None:
            self.errors.append(f"{case}: {reason}")
            return
        good = human == "good"
        cell = ("pass_" if passed else "fail_") + ("good" if good else "bad")
        setattr(self, cell, getattr(self, cell) + 1)
        if passed != good:
            self.disagreements.append(Disagreement(case, answer, human, human_reason, reason))

    @property
    def n(self) -> int:
        return self.pass_good + self.pass_bad + self.fail_good + self.fail_bad

    @property
    def accuracy(self) -> float | None:
        return (self.pass_good + self.fail_bad) / self.n if self.n else None

    def _chance(self) -> float:
        n = self.n
        passes, goods = self.pass_good + self.pass_bad, self.pass_good + self.fail_good
        return (passes * goods + (n - passes) * (n - goods)) / (n * n)

    @property
    def kappa(self) -> float | None:
        if not self.n or self._chance() >= 1:
            return None
        po, pe = self.accuracy or 0.0, self._chance()
        return (po - pe) / (1 - pe)

    def kappa_interval(self) -> tuple[float, float] | None:
        kappa = self.kappa
        if kappa is None:
            return None
        po, pe = self.accuracy or 0.0, self._chance()
        se = math.sqrt(po * (1 - po) / (self.n * (1 - pe) ** 2))
        return max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se)

    @property
    def false_pass(self) -> float | None:
        bad = self.pass_bad + self.fail_bad
        return self.pass_bad / bad if bad else None

    @property
    def false_fail(self) -> float | None:
        good = self.pass_good + self.fail_good
        return self.fail_good / good if good else None

    @property
    def calibrated(self) -> bool:
        kappa = self.kappa
        return kappa is not None and kappa >= self.min_kappa and self.n >= self.min_labels

    def figures(self) -> dict[str, Any]:
        """Every figure with its interval, as ``--json`` prints them."""
        return {
            "labels": self.n,
            "accuracy": self.accuracy,
            "accuracy_ci": wilson(self.pass_good + self.fail_bad, self.n),
            "kappa": self.kappa,
            "kappa_ci": self.kappa_interval(),
            "false_pass_rate": self.false_pass,
            "false_pass_ci": wilson(self.pass_bad, self.pass_bad + self.fail_bad),
            "false_fail_rate": self.false_fail,
            "false_fail_ci": wilson(self.fail_good, self.pass_good + self.fail_good),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "fingerprint": self.fingerprint,
            **self.figures(),
            "confusion": {
                "pass_good": self.pass_good,
                "pass_bad": self.pass_bad,
                "fail_good": self.fail_good,
                "fail_bad": self.fail_bad,
            },
            "calibrated": self.calibrated,
            "floor": {"min_kappa": self.min_kappa, "min_labels": self.min_labels},
            "disagreements": [asdict(d) for d in self.disagreements],
            "errors": self.errors,
        }

    def headline(self) -> str:
        """``kappa 0.71 [0.52, 0.90] on 34 labels: calibrated (floor kappa >= 0.6 on >= 30)``."""
        verdict = "calibrated" if self.calibrated else "NOT calibrated"
        return (
            f"kappa {_num(self.kappa)} {_ci(self.kappa_interval())} on {self.n} labels: {verdict} "
            f"(floor kappa >= {self.min_kappa:g} on >= {self.min_labels})"
        )

    def lines(self) -> list[str]:
        f = self.figures()
        lines = [
            f"judge {self.judge}: {self.headline()}",
            f"  accuracy     {_pct(f['accuracy'])} {_ci(f['accuracy_ci'], pct=True)}",
            f"  false pass   {_pct(f['false_pass_rate'])} {_ci(f['false_pass_ci'], pct=True)}"
            f"  ({self.pass_bad} of {self.pass_bad + self.fail_bad} bad answers passed)",
            f"  false fail   {_pct(f['false_fail_rate'])} {_ci(f['false_fail_ci'], pct=True)}"
            f"  ({self.fail_good} of {self.pass_good + self.fail_good} good answers failed)",
            "               human good  human bad",
            f"  judge pass   {self.pass_good:>10}  {self.pass_bad:>9}",
            f"  judge fail   {self.fail_good:>10}  {self.fail_bad:>9}",
        ]
        if self.errors:
            lines.append(f"  no verdict on {len(self.errors)} (left out): " + "; ".join(self.errors[:3]))
        for d in self.disagreements:
            answer = " ".join(d.answer.split())
            answer = answer if len(answer) <= 60 else answer[:57] + "..."
            judge = "fail" if d.human == "good" else "pass"
            lines.append(
                f"  ~ {d.case} {answer!r}: human {d.human} ({d.human_reason or 'no reason'}); "
                f"judge {judge} ({d.judge_reason})"
            )
        return lines


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _ci(ci: tuple[float, float] | None, *, pct: bool = False) -> str:
    if ci is None:
        return ""
    return f"[{_pct(ci[0])}, {_pct(ci[1])}]" if pct else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def read_calibrations(path: str | Path) -> dict[str, dict[str, Any]]:
    """The judges' last calibrations (``{}`` when none, or when the file does not read: recalibrate)."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def save_calibration(path: str | Path, agreement: Agreement) -> Path:
    """Keep ``agreement`` as its judge's calibration in the file at ``path`` (the other judges' stay)."""
    records = read_calibrations(path)
    records[agreement.judge] = {
        "fingerprint": agreement.fingerprint,
        "labels": agreement.n,
        "kappa": agreement.kappa,
        "accuracy": agreement.accuracy,
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, orjson.dumps(records, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n", atomic=True)
    return path


def calibration_problem(
    record: dict[str, Any] | None, fingerprint: str, min_kappa: float, min_labels: int
) -> str | None:
    """Why a judge is not calibrated (None when it is): never calibrated, changed since, or below the floor."""
    if record is None:
        return "never calibrated (harvester judge calibrate NAME)"
    if record.get("fingerprint") != fingerprint:
        return "its config or rubric changed since it was calibrated"
    kappa, labels = record.get("kappa"), int(record.get("labels") or 0)
    if kappa is None or kappa < min_kappa or labels < min_labels:
        return f"kappa {_num(kappa)} on {labels} labels, below the floor (kappa >= {min_kappa:g} on >= {min_labels})"
    return None
