"""The review page's markup: every pending case, grouped by the cluster harvest proposed it for, with what a
reviewer needs to decide (the prompt, what the run did, the answer, the fixtures, the proposed checks, the
notes, its twins, the secrets a redaction rule still matches) and a form per decision.

The forms only name a decision; ``_review_web`` makes it through the review actions in ``harvester.case``,
so the page holds no rule of its own. A harvested check's questions are the ones it asks on the terminal
(``field_update`` run with every default), one input each. Case content is untrusted: every string is
escaped (``html_text``, ``html_attr``) after its control and format characters are made ``visible``; the
page loads nothing (its style is inline, it has no script), so it works offline.

A stable contract for scripts and tests: every case is ``<article data-case-id=ID id="case-ID">`` inside
a ``<section data-cluster=C>``; an outcome shows in ``#notice``, a refusal in ``#error``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from ..case import EDITABLE, AgentCase, CaseFolder, case_files, field_update, load_case
from ..errors import CaseFileError, InputError
from ..report import HTML_CSS, html_attr, html_text, visible

__all__ = ["Question", "Reviewable", "page", "questions", "reviewables"]

_CSS = """
.case{content-visibility:visible}
.cluster>h2 .mute{font-weight:400}.case>div{padding:0 12px 10px}.case>h3{margin:0;padding:6px 10px;font-size:15px}
form{display:inline-flex;gap:6px;align-items:center;margin:2px 12px 2px 0}form.field{display:flex}
form.field>label{min-width:150px}form.field input[type=text]{width:420px}
#notice,#error{padding:6px 24px;margin:0;font-weight:600}#error{background:#ffebe9}#notice{background:#dafbe1}
details.fx>summary{cursor:pointer}
"""


@dataclass(frozen=True)
class Question:
    """One question a field's edit asks (``checks.Ask``): an input on the page."""

    text: str
    default: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reviewable:
    """A case file as the page reads it: its case, or why it does not read."""

    id: str
    pending: bool
    case: AgentCase | None
    error: str | None = None


def reviewables(folder: CaseFolder) -> list[Reviewable]:
    """Every case file of ``folder``: one that does not read is shown (and may be rejected), never fatal."""
    out = []
    for path in case_files(folder.root):
        pending = path.parent == folder.folder_for("pending")
        try:
            case = load_case(path, max_bytes=folder.max_bytes)
        except CaseFileError as exc:
            out.append(Reviewable(path.stem, pending, None, str(exc)))
            continue
        out.append(Reviewable(case.id, case.status == "pending", case))
    return out


def questions(case: AgentCase, name: str) -> list[Question] | str:
    """What editing ``name`` asks (each with its current answer as the default), or why it cannot be edited."""
    asked: list[Question] = []

    def ask(question: str, default: str, choices: Sequence[str] = ()) -> str:
        asked.append(Question(question, default, tuple(choices)))
        return default

    try:
        field_update(case, name, ask)
    except ValueError as exc:
        return str(exc)
    return asked


def t(value: object) -> str:
    """Untrusted text for an element's content."""
    return html_text(visible(str(value)))


def a(value: object) -> str:
    """Untrusted text for an attribute value (written in double quotes)."""
    return html_attr(visible(str(value)))


def page(folder: CaseFolder, *, notice: str | None = None, error: str | None = None) -> str:
    """The whole page: the pending cases of ``folder`` by cluster (``notice``: what was just decided;
    ``error``: why a decision was refused)."""
    every = reviewables(folder)
    pending = [item for item in every if item.pending]
    clusters: dict[str, list[Reviewable]] = {}
    for item in pending:
        cluster = item.case.source.cluster if item.case is not None else None
        clusters.setdefault(cluster or "", []).append(item)
    twins = _signatures(every)
    parts = [
        '<!doctype html><html lang=en><head><meta charset=utf-8><link rel=icon href="data:,">',
        '<meta name=viewport content="width=device-width,initial-scale=1">',
        f"<title>harvester review: {t(folder.root)}</title><style>{HTML_CSS}{_CSS}</style></head><body>",
        f"<header><h1>harvester review: {len(pending)} pending case{'s' * (len(pending) != 1)}</h1>",
        f"<p class=mute>{t(folder.root)} · accepted cases move to the top folder, rejected ones to rejected/; "
        "then: harvester suite bump</p></header>",
    ]
    if error:
        parts.append(f"<p id=error role=alert>not changed: {t(error)}</p>")
    if notice:
        parts.append(f"<p id=notice role=status>{t(notice)}</p>")
    parts.append("<main>")
    if not pending:
        parts.append("<p>no pending cases (harvest some with: harvester harvest)</p>")
    for cluster in sorted(clusters, key=lambda c: (c == "", c)):
        items = clusters[cluster]
        title = f"cluster {cluster}" if cluster else "no cluster"
        parts.append(
            f'<section class=cluster data-cluster="{a(cluster)}"><h2>{t(title)} '
            f"<span class=mute>({len(items)} case{'s' * (len(items) != 1)})</span></h2>"
        )
        parts += [_case(folder, item, twins) if item.case is not None else _unreadable(item) for item in items]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _signatures(every: list[Reviewable]) -> dict[str, list[tuple[str, str]]]:
    """Run signature -> (id, status) of every readable case with one: a case's twins share its signature."""
    out: dict[str, list[tuple[str, str]]] = {}
    for case in (item.case for item in every if item.case is not None):
        if case.source.signature:
            out.setdefault(case.source.signature, []).append((case.id, case.status))
    return out


def _unreadable(item: Reviewable) -> str:
    return (
        f'<article class=case id="case-{a(item.id)}" data-case-id="{a(item.id)}"><h3>{t(item.id)}</h3>'
        f"<div><p class=bad>does not read: {t(item.error)}</p>{_reject(item.id)}</div></article>"
    )


def _case(folder: CaseFolder, item: Reviewable, twins: dict[str, list[tuple[str, str]]]) -> str:
    case = item.case
    assert case is not None
    tags = "".join(f"<span class=tag>{t(tag)}</span>" for tag in case.tags)
    out = [
        f'<article class=case id="case-{a(case.id)}" data-case-id="{a(case.id)}">',
        f"<h3>{t(case.id)}{tags} <i class=mute>{t(case.why)}</i></h3><div>",
    ]
    leaks = folder.secret_fields(case)
    if leaks:
        out.append(f"<p class=bad data-secrets>a redaction rule still matches: {t(', '.join(leaks))}</p>")
    out += [f"<p class=warn>review: {t(note)}</p>" for note in case.review_notes]
    same = [(i, s) for i, s in twins.get(case.source.signature or "", []) if i != case.id]
    if same:
        out.append(f"<p>twins (same run signature): {t(', '.join(f'{i} ({s})' for i, s in same))}</p>")
    out.append(f"<h4>prompt</h4><pre class=prompt>{t(case.prompt)}</pre>")
    rec = case.recorded
    cost = f", cost {rec.cost:.6f}" if rec.cost is not None else ""
    path = " → ".join(rec.trajectory) or "(no successful tool calls)"
    out.append(f"<h4>recorded</h4><p class=trajectory>{t(path)} <span class=mute>(stop {t(rec.stop)}, "
               f"{rec.steps} step{'s' * (rec.steps != 1)}{t(cost)})</span></p>")  # fmt: skip
    if rec.denied:
        out.append(f"<p class=warn>denied (requested, never executed): {t(', '.join(rec.denied))}</p>")
    out.append(f"<h4>answer</h4><pre class=answer>{t(rec.answer or '(none)')}</pre>")
    if rec.answer:
        out.append(_labels(case))
    out.append(f"<h4>fixtures ({len(case.fixtures)})</h4>")
    out += [_fixture(i, fx) for i, fx in enumerate(case.fixtures, 1)]
    out.append(f"<h4>proposed checks</h4><ul class=checks>{_checks(case)}</ul>")
    source = case.source
    seen = f"seen {source.seen}" + (f", failure kind {source.failure_kind}" if source.failure_kind else "")
    out.append(f"<p class=mute>{t(seen)}{t(', trace ' + source.trace_id) if source.trace_id else ''}</p>")
    out.append(_decide(case.id))
    out.append("<details class=edit><summary>edit a field</summary>")
    out += [_field(case, name) for name in EDITABLE]
    out.append("</details></div></article>")
    return "".join(out)


def _fixture(i: int, fx: Any) -> str:
    body = {"error": fx.error.model_dump()} if fx.error else {"result": fx.result}
    size = len(orjson.dumps(fx.error.model_dump() if fx.error else fx.result))
    outcome = f"error {fx.error.type}" if fx.error else "ok"
    mark = " TRUNCATED" if fx.truncated else ""
    shown = orjson.dumps({"args": fx.args, **body}, option=orjson.OPT_INDENT_2).decode()
    return (
        f"<details class=fx><summary>{i}. <code>{t(fx.tool)}</code> {t(outcome)} "
        f"<span class=mute>({_size(size)}{mark})</span></summary><pre>{t(shown)}</pre></details>"
    )


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _checks(case: AgentCase) -> str:
    try:
        labels = [c.label() for c in case.compiled_checks()]
    except InputError as exc:
        return f"<li class=f>{t(exc)}</li>"
    return "".join(f"<li>{t(label)}</li>" for label in labels) or "<li class=n>none</li>"


def _labels(case: AgentCase) -> str:
    """The reviewers' labels on the answers to this prompt, and a form to label the recorded one."""
    mine = [lb for lb in case.labels if lb.answer == case.recorded.answer]
    shown = "".join(
        f"<li data-label={a(lb.verdict)}>{t(lb.verdict)}{t(': ' + lb.reason) if lb.reason else ''}</li>" for lb in mine
    )
    return (
        (f"<ul class=labels>{shown}</ul>" if shown else "")
        + f'<form class=label method=post action="{_action(case.id, "label")}"><label>this answer is '
        "<select name=verdict><option value=good>good</option><option value=bad>bad</option></select></label>"
        '<input type=text name=reason placeholder="why (for judge calibration)" aria-label="why">'
        "<button type=submit name=label>label</button></form>"
    )


def _action(case_id: str, verb: str) -> str:
    return f"case/{a(quote(case_id, safe=''))}/{verb}"


def _decide(case_id: str) -> str:
    return (
        f'<p class=decide><form method=post action="{_action(case_id, "accept")}">'
        "<button type=submit name=accept>accept</button></form>" + _reject(case_id) + "</p>"
    )


def _reject(case_id: str) -> str:
    return (
        f'<form method=post action="{_action(case_id, "reject")}"><input type=text name=why required '
        'placeholder="why reject" aria-label="why reject"><button type=submit name=reject>reject</button></form>'
    )


def _field(case: AgentCase, name: str) -> str:
    """One field's form: its questions, each answered by default with what the case holds now."""
    asked = questions(case, name)
    head = f'<form class=field method=post action="{_action(case.id, "edit")}" data-field="{a(name)}">'
    head += f'<input type=hidden name=field value="{a(name)}"><label>{t(name)}</label>'
    if isinstance(asked, str):
        return f"{head}<span class=mute>{t(asked)}</span></form>"
    inputs = []
    for q in asked:
        now = q.default  # the field's current value (``field_update`` asks with it)
        if q.choices:
            options = "".join(
                f'<option{" selected" if c == q.default else ""} value="{a(c)}">{t(c)}</option>' for c in q.choices
            )
            inputs.append(f'<select name=answer title="{a(q.text)}">{options}</select>')
        else:
            inputs.append(f'<input type=text name=answer value="{a(now)}" title="{a(q.text)}" aria-label="{a(name)}">')
    return f"{head}{''.join(inputs)}<button type=submit>save</button></form>"
