"""What the judges did in a replay, as a report stores it: their calls, cache hits and token cost (apart
from the agent's: a judge's bill is the harness's, not the agent's cost per success), and the judges
that gated cases without being calibrated against human labels."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from pydantic import BaseModel, ConfigDict, Field

from ..checks import Agreement, Tally
from ._html_assets import CSS

__all__ = ["Judging", "calibration_html"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Judging(_Strict):
    """The judges of one replay, each judge's bill a ``checks.Tally``; ``skipped``: ``--no-judges``
    (their checks were not run)."""

    judges: list[Tally] = Field(default_factory=list)
    skipped: bool = False

    def line(self) -> str:
        """``judges: 3 calls, 9 cache hits, 4,210 tokens, cost 0.000630 (not in the agent's cost)``."""
        if self.skipped:
            return "judges: skipped (--no-judges): cases naming a judge were checked without it"
        calls = sum(j.calls for j in self.judges)
        hits = sum(j.cache_hits for j in self.judges)
        tokens = sum(j.input_tokens + j.output_tokens for j in self.judges)
        costs = [j.cost for j in self.judges if j.cost is not None]
        cost = f"cost {sum(costs):.6f}" if costs else "cost n/a"
        failed = sum(j.failures for j in self.judges)
        failures = f", {failed} gave no verdict" if failed else ""
        return (
            f"judges: {calls} call{'s' * (calls != 1)}, {hits} cache hit{'s' * (hits != 1)}{failures}, "
            f"{tokens:,} tokens, {cost} (not in the agent's cost)"
        )

    def warnings(self) -> list[str]:
        """A line per judge that gated cases without being calibrated."""
        return [
            f"warning: judge {j.name} gated cases but is not calibrated: {j.uncalibrated}"
            for j in self.judges
            if j.uncalibrated is not None
        ]

    @classmethod
    def merged(cls, parts: Iterable[Judging | None]) -> Judging | None:
        """Shards' judging summed per judge (None when no shard ran judges)."""
        given = [p for p in parts if p is not None]
        if not given:
            return None
        uses: dict[str, Tally] = {}
        for part in given:
            for j in part.judges:
                seen = uses.get(j.name)
                if seen is None:
                    uses[j.name] = j.model_copy()
                    continue
                for count in ("calls", "cache_hits", "failures", "input_tokens", "output_tokens"):
                    setattr(seen, count, getattr(seen, count) + getattr(j, count))
                if j.cost is not None:
                    seen.cost = (seen.cost or 0.0) + j.cost
        return cls(judges=list(uses.values()), skipped=all(p.skipped for p in given))


def calibration_html(agreement: Agreement) -> str:
    """A self-contained page of one calibration: the figures, the confusion table, the disagreements."""
    d = agreement.to_dict()
    rows = "".join(
        f"<tr><td>{escape(d_.case)}</td><td>{escape(d_.human)}: {escape(d_.human_reason)}</td>"
        f"<td>{escape(d_.judge_reason)}</td><td>{escape(d_.answer[:300])}</td></tr>"
        for d_ in agreement.disagreements
    )
    kind = "ok" if agreement.calibrated else "bad"
    figures = "".join(f"<li><pre>{escape(line)}</pre></li>" for line in agreement.lines()[1:7])
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>judge {escape(agreement.judge)}</title>"
        f"<style>{CSS}</style></head><body><section id=calibration><h1>judge {escape(agreement.judge)}</h1>"
        f"<p class={kind}>{escape(agreement.headline())}</p><ul>{figures}</ul>"
        f"<h2>disagreements ({len(agreement.disagreements)})</h2><table><tr><th>case</th><th>human</th>"
        f"<th>judge</th><th>answer</th></tr>{rows}</table><p class=mute>fingerprint {escape(d['fingerprint'])}</p>"
        "</section></body></html>\n"
    )
