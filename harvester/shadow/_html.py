"""The shadow report as one self-contained page, laid out by the replay report's machinery: the five
lines and the gates on top, every rate with its interval overall, per agent, per failure kind and per
tool path, the changed runs worst first, then each kept replay as the replay report shows a case
(the recorded and replayed trajectories aligned, the first divergent step marked, both answers)."""

from __future__ import annotations

from ..report import GateResult, html_page, html_table, html_text
from ._report import GROUPS, ShadowReport
from ._tally import FLAGS, Tally

__all__ = ["html"]

_SHOWN = ("same", *FLAGS[:-2])  # errored and live tool calls are in the summary when they happen
_MAX_ROWS = 500  # changed runs listed in the table (the JSON holds them all)


def html(report: ShadowReport, gates: list[GateResult] | None = None) -> str:
    e = html_text
    failed = any(not g.passed for g in gates or ())
    kind = "fail" if failed else "pass"
    lines = "".join(f"<li>{e(line)}</li>" for line in report.summary_lines())
    top = [
        f"<header><h1>harvester shadow: {e(report.candidate)}</h1>",
        f'<p class="verdict {kind}" id=verdict data-exit-code={int(failed)}>'
        f"{'a gate failed' if failed else 'every gate passed' if gates else 'no gate set'}</p>",
        f"<ul id=summary>{lines}</ul><p class=mute>{e(report.created_at)}</p></header><section id=suite>",
        "<div class=grid>",
        html_table("gates", ["gate", "result", "value"], [_gate(g) for g in gates or ()]),
        _rates("overall", {"all runs": report.total}),
        *(_rates(f"by {group.replace('_', ' ')}", report.groups.get(group, {})) for group in GROUPS),
        "</div>",
        _changes(report),
        "</section>",
    ]
    return html_page(f"harvester shadow: {report.candidate}", "".join(top), report.details)


def _gate(g: GateResult) -> list[str]:
    verdict = "<b class=ok>pass</b>" if g.passed else "<b class=bad>FAIL</b>"
    return [f"<code>{html_text(g.expr)}</code>", verdict, html_text(g.detail)]


def _rates(title: str, tallies: dict[str, Tally]) -> str:
    """One row per scope: its runs, then each rate as ``count (rate, 95% CI)``."""
    rows = [
        [html_text(name), str(t.runs), *(html_text(t.rate_text(flag)) for flag in _SHOWN)]
        for name, t in sorted(tallies.items(), key=lambda kv: -kv[1].runs)
    ]
    return html_table(title, ["scope", "runs", *(f.replace("_", " ") for f in _SHOWN)], rows)


def _changes(report: ShadowReport) -> str:
    e = html_text
    if not report.changes:
        return "<h2>changed runs</h2><p class=mute>none: every run behaved as in production</p>"
    kept = {d.id for d in report.details}
    rows = "".join(
        f'<tr data-run-id="{e(c.id)}"><td>'
        + (f'<a href="#case-{e(c.id)}">{e(c.id)}</a>' if c.id in kept else e(c.id))
        + f"</td><td>{e(c.agent or '')}</td><td>{e(c.why())}</td></tr>"
        for c in report.changes[:_MAX_ROWS]
    )
    n = len(report.changes)
    more = f"<p class=mute>and {n - _MAX_ROWS} more in the JSON report</p>" if n > _MAX_ROWS else ""
    head = "<tr><th>run</th><th>agent</th><th>what changed</th></tr>"
    return f"<h2>changed runs ({n})</h2><table id=changes>{head}{rows}</table>{more}"
