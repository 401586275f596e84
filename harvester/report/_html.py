"""The HTML replay report: one self-contained page that shows *why* a case passed or failed.

The suite at the top (verdict, gates, tags, trials, recovery, the baseline comparison), then every case:
its checks, the recorded and the replayed trajectory aligned step by step with the first divergence
marked, the args (a diff where they differ), the calls the recording could not answer, the injected
failure and the two answers side by side. Every figure comes from the report and its ``GateOutcome``
(the terminal and Markdown renderers' sources); this module only lays them out.

A stable contract for scripts and tests: every case is an element with ``data-case-id`` and
``data-verdict`` (passed, failed, errored, flaky) and ``id="case-<id>"``; the first differing step is a
row with ``data-first-divergence``. Everything from case data is escaped: text with ``html.escape``,
the one JSON blob in a ``<script>`` with ``<``, ``>``, ``&`` and U+2028/9 as ``\\uXXXX``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

import orjson

from ..canonical import leaves
from ._compare import failed_too_text
from ._html_assets import CSS, JS
from ._metrics import by_tag, delta, fmt
from ._results import ANSWER_CHARS, Call, CaseResult, args_text

if TYPE_CHECKING:
    from ._compare import Comparison
    from ._gates import GateOutcome
    from ._report import Report

__all__ = ["attr", "case_verdict", "e", "html", "html_chunks", "page", "page_chunks", "script_json", "table"]


def e(value: object) -> str:
    """Text, escaped (``<``, ``>``, ``&``: quotes are text outside an attribute, and JSON is full of them)."""
    return escape(str(value), quote=False)


def attr(value: object) -> str:
    """An attribute value (always written in double quotes), escaped quotes included."""
    return escape(str(value), quote=True)


def script_json(value: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>``, ``<!--``, entity or line separator can end or bend it."""
    text = orjson.dumps(value).decode()
    for ch, sub in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, sub)
    return text


def case_verdict(r: CaseResult) -> str:
    """``passed``, ``failed``, ``errored`` or ``flaky`` (passed some trials, or passed a --confirm rerun)."""
    if r.errored:
        return "errored"
    if r.confirmation == "flaky" or r.flaky:
        return "flaky"
    return "passed" if r.passed else "failed"


def html(report: Report, baseline: Report | None = None, outcome: GateOutcome | None = None) -> str:
    """The page for ``report`` (against ``baseline``; ``outcome`` as judged, else the default gates)."""
    return "".join(html_chunks(report, baseline, outcome))


def html_chunks(report: Report, baseline: Report | None = None, outcome: GateOutcome | None = None) -> Iterator[str]:
    """``html`` as it is written, a case at a time (``page_chunks``)."""
    if outcome is None:
        from ._gates import evaluate_gates

        outcome = evaluate_gates(report, (), baseline)
    title = f"harvester replay: {report.suite}" + (f" {report.suite_version}" if report.suite_version else "")
    yield from page_chunks(title, _suite(report, baseline, outcome), report.results)


def page(title: str, top: str, results: Sequence[CaseResult]) -> str:
    """A whole page: ``title``, ``top`` (markup the caller escaped), then every result as a case the
    filters (failed only, tag, text) can show or hide. ``harvester shadow --html`` lays its runs out so too."""
    return "".join(page_chunks(title, top, results))


def page_chunks(title: str, top: str, results: Sequence[CaseResult]) -> Iterator[str]:
    """``page`` as it is written, a case at a time: one self-contained file, built from two passes over
    ``results`` (its tags, then its cases), so a spool on disk is never held whole."""
    tags = sorted({t for r in results for t in r.tags})
    yield from (
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width,initial-scale=1">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
        top,
        "<nav id=filters><label><input type=checkbox id=f-failed> failed only</label>",
        '<label>tag <select id=f-tag><option value="">all</option></select></label>',
        '<input type=search id=f-text placeholder="search ids, checks, tools, answers" aria-label=search>',
        "<span id=f-count class=mute></span></nav><main id=cases>",
    )
    yield from (_case(r) for r in results)
    yield "</main>"
    yield f"<script type=application/json id=harvester-data>{script_json({'tags': tags})}</script>"
    yield f"<script>{JS}</script></body></html>\n"


# -- the suite ------------------------------------------------------------------------------------
def _suite(report: Report, baseline: Report | None, outcome: GateOutcome) -> str:
    code = outcome.exit_code
    kind = "pass" if code == 0 else "inconclusive" if code == 3 else "fail"
    version = f" {report.suite_version}" if report.suite_version else ""
    shard = f" shard {report.shard}" if report.shard else ""
    out = [
        f"<header><h1>harvester replay: {e(report.suite)}{e(version)}{e(shard)}</h1>",
        f'<p class="verdict {kind}" id=verdict data-exit-code={code}>{e(outcome.summary())} (exit {code})</p>',
        f"<p><b>{e(report.headline())}</b>, mean steps {report.mean_steps:.1f}, total cost {e(report.cost_text())}"
        f"<span class=mute> · {e(report.created_at)}{' · baseline ' + e(baseline.created_at) if baseline else ''}"
        "</span></p>",
    ]
    warnings = [*outcome.warnings(report), *(outcome.comparison.warnings if outcome.comparison else [])]
    out += [f"<p class=warn>{e(w)}</p>" for w in warnings]
    out.append("</header><section id=suite><div class=grid>")
    out.append(table("gates", ["gate", "result", "value"], [
        [f"<code>{e(g.label)}</code>", '<b class=ok>pass</b>' if g.passed else '<b class=bad>FAIL</b>', e(g.detail)]
        for g in outcome.gates
    ]))  # fmt: skip
    tags = by_tag(report.cases)
    if report.trials > 1:
        ks = range(1, report.trials + 1)
        by_k = report.pass_hat_k_by_tag()
        rows = [[e(t), f"{v:.0%}", *(_pct(by_k.get(t, {}).get(k)) for k in ks)] for t, v in tags.items()]
        out.append(table("pass rate by tag", ["tag", "pass", *(f"pass^{k}" for k in ks)], rows))
    else:
        out.append(table("pass rate by tag", ["tag", "pass"], [[e(t), f"{v:.0%}"] for t, v in tags.items()]))
    out.append(_metrics(report, outcome.comparison))
    rec = report.recovery()
    if rec["by_mode"]:
        out.append(
            table("recovery by mode", ["mode", "recovered"], [[e(m), _pct(v)] for m, v in rec["by_mode"].items()])
        )
        out.append(
            table("recovery by tool", ["tool", "recovered"], [[e(t), _pct(v)] for t, v in rec["by_tool"].items()])
        )
    out.append("</div>")
    if report.trials > 1:
        flaky = [r.id for r in report.results if r.flaky]
        pk = "  ".join(f"pass^{k} {v:.0%}" for k, v in report.pass_hat_k().items())
        out.append(f"<h2>trials: {report.trials} per case</h2><p>{e(pk)}</p><p>flaky: {_links(flaky)}</p>")
    confirmed = [r.id for r in report.results if r.confirmation == "confirmed"]
    flaky_now = [r.id for r in report.results if r.confirmation == "flaky"]
    if confirmed or flaky_now:
        out.append(f"<p>confirm: failed every rerun too {_links(confirmed)}; passed a rerun {_links(flaky_now)}</p>")
    if report.errored:
        out.append(f"<p class=bad>errored (not evaluated): {_links([r.id for r in report.errored])}</p>")
    if report.refused:
        out.append(
            f"<p class=warn>refused {report.refused} call(s) made outside any case: "
            f"{e('; '.join(report.refused_calls))}</p>"
        )
    out += [f"<p class=bad>{e(line)}</p>" for line in report.unsealed_lines()]
    for line in (report.model_line(), report.sandbox_line()):
        if line:
            out.append(f"<p>{e(line)}</p>")
    if report.judging is not None:
        out.append(_judges(report))
    if outcome.comparison is not None:
        out.append(_comparison(outcome))
    out.append("</section>")
    return "".join(out)


def _judges(report: Report) -> str:
    """The judges section: each judge's calls, cache hits, tokens, cost and calibration."""
    assert report.judging is not None
    rows = [
        [
            f"<code>{e(j.name)}</code>",
            str(j.calls),
            str(j.cache_hits),
            str(j.failures),
            f"{j.input_tokens + j.output_tokens:,}",
            e(f"{j.cost:.6f}" if j.cost is not None else "n/a"),
            "<b class=ok>calibrated</b>" if j.uncalibrated is None else f"<b class=bad>{e(j.uncalibrated)}</b>",
        ]
        for j in report.judging.judges
    ]
    head = ["judge", "calls", "cache hits", "no verdict", "tokens", "cost", "calibration"]
    lines = [f"<p>{e(report.judging.line())}</p>"]
    lines += [f"<p class=warn>{e(w)}</p>" for w in report.judging.warnings()]
    return "<section id=judges>" + "".join(lines) + table("judges", head, rows) + "</section>"


def _comparison(outcome: GateOutcome) -> str:
    c = outcome.comparison
    assert c is not None
    out = ["<h2>against the baseline</h2><ul id=comparison>"]
    out.append(f"<li>regressed: {_links(c.regressed)}</li><li>improved: {_links(c.improved)}</li>")
    if c.failed_too:
        out.append(f"<li id=failed-too>{failed_too_text(len(c.failed_too))}: {_links(c.failed_too)}</li>")
    out += [f"<li>inconclusive: {_links([i])} {e(c.decides.get(i, ''))}</li>" for i in c.inconclusive]
    if c.changed:
        out.append(f"<li>changed, not significant: {_links(c.changed)}</li>")
    if c.pass_to_fail or c.fail_to_pass:
        out.append(f"<li>flips: pass → fail {_links(c.pass_to_fail)}; fail → pass {_links(c.fail_to_pass)}</li>")
    out += [f"<li>steps: {_links([i])} {b} → {n}</li>" for i, (b, n) in c.steps.items()]
    if c.missing:
        out.append(f"<li>in the baseline only: {e(', '.join(c.missing))}</li>")
    if c.added:
        out.append(f"<li>new: {_links(c.added)}</li>")
    out.append("</ul>")
    return "".join(out)


def _metrics(report: Report, c: Comparison | None) -> str:
    """The report's metrics; with a baseline, its value and the change (both over the cases both ran,
    as the comparison and the ``delta:`` gates count them)."""
    if c is None:
        return table("metrics", ["metric", "value"], [[e(m), e(fmt(v))] for m, v in report.metrics().items()])
    rows = []
    for m, v in report.metrics().items():
        b, n = c.deltas.get(m, (None, None))
        d = delta(b, n)
        rows.append([e(m), e(fmt(v)), e(fmt(b)), e(f"{d:+.4g}") if d else "0" if d is not None else "n/a"])
    shown = table("metrics", ["metric", "value", "baseline*", "change*"], rows)
    return shown.removesuffix("</div>") + "<p class=mute>* over the cases both reports ran</p></div>"


def table(title: str, head: list[str], rows: list[list[str]]) -> str:
    """A titled table; cells are markup the caller escaped."""
    if not rows:
        return f"<div><h2>{e(title)}</h2><p class=mute>none</p></div>"
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div><h2>{e(title)}</h2><table><tr>{''.join(f'<th>{e(h)}</th>' for h in head)}</tr>{body}</table></div>"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _links(ids: list[str]) -> str:
    return ", ".join(f'<a href="#case-{attr(i)}">{e(i)}</a>' for i in ids) or "none"


# -- one case -------------------------------------------------------------------------------------
def _case(r: CaseResult) -> str:
    v = case_verdict(r)
    tags = "".join(f"<span class=tag>{e(t)}</span>" for t in r.tags)
    trials = f" <span class=mute>{r.passes}/{r.trials} trials</span>" if r.trials > 1 else ""
    variant = f' data-variant-of="{attr(r.variant_of)}"' if r.variant_of else ""
    out = [
        f'<article class=case id="case-{attr(r.id)}" data-case-id="{attr(r.id)}" data-verdict={v} '
        f'data-tags="{attr(orjson.dumps(r.tags).decode())}"{variant}><details{" open" if v != "passed" else ""}>',
        f"<summary><span class=b>{v}</span><b>{e(r.id)}</b>{tags}{trials} <i>{e(r.why)}</i></summary><div>",
    ]
    if r.error:
        out.append(f"<p class=bad>agent error: {e(r.error)}</p>")
    if r.checks:
        out.append("<h4>checks</h4><ul class=checks>")
        for c in r.checks:
            cls, mark = ("", "✓") if c.passed else (" class=n", "–") if c.passed is None else (" class=f", "✗")
            out.append(f"<li{cls}>{mark} <b>{e(c.name)}</b>: {e(c.detail)}</li>")
        out.append("</ul>")
    if r.injected is not None:
        out.append(f"<p>injected failure: <code>{e(r.injected.tool)}</code> → <b>{e(r.injected.mode)}</b></p>")
    if r.divergence is not None:
        out.append(f"<p class=warn>{e(r.divergence.summary())}</p>")
    out.append(_model(r))
    out.append(_steps(r))
    if r.no_fixture:
        out.append(_no_fixture(r))
    if r.sandboxed:
        shown = "".join(f"<li{' class=warn' * bool(c.differs)}><code>{e(c.summary())}</code></li>" for c in r.sandboxed)
        out.append(f"<h4>ran for real in the sandbox ({len(r.sandboxed)})</h4><ul class=sandbox>{shown}</ul>")
    if r.unused_calls:
        shown = "".join(f"<li><code>{e(c)}</code></li>" for c in r.unused_calls)
        out.append(f"<h4>recorded calls never made ({r.unused})</h4><ul>{shown}</ul>")
    if r.notes:
        out.append("".join(f"<p class=mute>note: {e(n)}</p>" for n in r.notes))
    out.append(
        f"<div class=answers><div><h4>recorded answer</h4><pre>{e(r.recorded_answer or '(none)')}</pre></div>"
        f"<div><h4>replayed answer <span class=mute>(stop: {e(r.stop)})</span></h4>"
        f"<pre>{e(_cut(r.answer) or '(none)')}</pre></div></div>"
    )
    out.append("</div></details></article>")
    return "".join(out)


def _model(r: CaseResult) -> str:
    """How the case's model was served, and its drift line by line (nothing when the model was live)."""
    m = r.model
    if m is None:
        return ""
    head = f"<h4>model: {e(m.mode)}</h4><p>{m.served} of {m.recorded} steps served from the recording"
    if m.live_from is not None:
        head += f"; the live model answered from step {m.live_from}"
    head += "</p>"
    if m.unservable is not None:
        return head + f"<p class=warn>not served from the recording: {e(m.unservable)}</p>"
    if m.drift is None:
        return head
    changes = "".join(f"<li><code>{e(c)}</code></li>" for c in m.drift.changes)
    return head + f"<p class=warn>model_input_changed at step {m.drift.step}</p><ul>{changes}</ul>"


def _cut(text: str | None) -> str | None:
    """The replayed answer cut like the report cuts the recorded one (the JSON keeps it whole)."""
    return text if text is None or len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS] + " ... (cut)"


def _aligned(rec: list[Call], rep: list[Call]) -> list[tuple[int | None, Call | None, Call | None, bool]]:
    """Rows (replayed step, recorded call, replayed call, trajectory pair): the successful calls pair
    up in order as the trajectory check and ``Divergence`` count them; a call that did not succeed
    sits on its own row, beside a recorded failed call of the same tool if there is one."""
    rows: list[tuple[int | None, Call | None, Call | None, bool]] = []
    i = j = 0
    while i < len(rec) or j < len(rep):
        a = rec[i] if i < len(rec) else None
        b = rep[j] if j < len(rep) else None
        if b is not None and b.status != "ok":
            paired = a is not None and a.status != "ok" and a.tool == b.tool
            rows.append((j + 1, a if paired else None, b, False))
            i, j = i + paired, j + 1
        elif a is not None and a.status != "ok":
            rows.append((None, a, None, False))
            i += 1
        else:
            rows.append((j + 1 if b is not None else None, a, b, True))
            i, j = i + (a is not None), j + (b is not None)
    return rows


def _steps(r: CaseResult) -> str:
    rec, rep = r.recorded_calls, r.calls or [Call(tool=t) for t in r.trajectory]  # older reports: names only
    if not rec and not rep:
        return "<p class=mute>no tool calls recorded or replayed</p>"
    marked = r.divergence is None
    rows = []
    for step, a, b, pair in _aligned(rec, rep):
        first = ""
        if not marked and pair and (a is None or b is None or a.tool != b.tool):
            first, marked = f' data-first-divergence="{r.divergence.step if r.divergence else ""}"', True
        same = a is not None and b is not None and a.tool == b.tool
        diff = _args_diff(a.args, b.args) if a is not None and b is not None and same else ""
        shown = _call(b, same_args=same and not diff)
        rows.append(
            f'<tr{first} data-step="{step or ""}"><td>{step or "–"}</td><td>{_call(a)}</td><td>{shown}{diff}</td></tr>'
        )
    return (
        "<h4>trajectory</h4><table class=steps><tr><th>step</th><th>recorded</th><th>replayed</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _call(c: Call | None, *, same_args: bool = False) -> str:
    """A call's cell: tool, status unless ok, args (or "same args" beside a recorded call with these)."""
    if c is None:
        return "<i>(none)</i>"
    status = "" if c.status == "ok" else f" <span class='st x'>{e(c.status)}</span>"
    args = " <i>same args</i>" if same_args and c.args else ""
    args = args or (f" <code>{e(c.args)}</code>" if c.args is not None else "")
    return f"<b>{e(c.tool)}</b>{status}{args}"


def _args_diff(before: str | None, after: str | None) -> str:
    """The paths where two calls' args differ (``path: recorded → replayed``); text cut to
    ``ARGS_CHARS`` cannot be parsed, so then only "args differ"."""
    if before == after or before is None or after is None:
        return ""
    try:
        old, new = leaves(orjson.loads(before)), leaves(orjson.loads(after))
    except orjson.JSONDecodeError:
        return "<ul class=diff><li>args differ (cut: see both above)</li></ul>"
    items = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            was = e(old[path]) if path in old else "(absent)"
            now = e(new[path]) if path in new else "(absent)"
            items.append(f"<li><code>{e(path or '$')}</code>: <del>{was}</del> → <ins>{now}</ins></li>")
    return f"<ul class=diff>{''.join(items)}</ul>"


def _no_fixture(r: CaseResult) -> str:
    rows = [
        [
            f"<b>{e(c.tool)}</b>",
            e(c.reason),
            f"<code>{e(args_text(c.args))}</code>" if c.args is not None else "",
            f"<code>{e(args_text(c.closest))}</code>" if c.closest is not None else "(none)",
            e(", ".join(c.differs)),
        ]
        for c in r.no_fixture_calls
    ]
    head = ["tool", "reason", "args sent", "closest recorded args", "differs at"]
    more = f"<p class=mute>and {r.no_fixture - len(rows)} more</p>" if r.no_fixture > len(rows) else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<h4>calls the recording cannot answer ({r.no_fixture} no_fixture)</h4><table class=nofix><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr>{body}</table>{more}"
    )
