"""The Markdown summary renders what its data says: hostile strings in every field of a report (and of a gate
outcome) come out as text, checked by parsing the Markdown with a CommonMark parser (markdown-it-py, with
GitHub's tables and strikethrough).

The summary reaches the job summary and the pull-request comment (action.yml), so a case, a check or an
agent must not put HTML there (an unclosed ``<!--`` hides the rest, the exit code too), nor an image, a link,
an autolinked URL, an @mention, a heading or a bidi override.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from harvester.report import (
    Call,
    CaseResult,
    CheckResult,
    Comparison,
    Divergence,
    GateOutcome,
    GateResult,
    Injected,
    ModelDrift,
    ModelServed,
    NoFixtureCall,
    Report,
)
from harvester.report._inert import JOINER, inert

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<b>bold</b> <script>alert(1)</script>",
    "<!-- the rest is hidden",
    "@octocat and @my-org/security-team",
    "![pixel](https://evil.test/p.png)",
    "[click](https://evil.test) [ref][x]",
    "<https://evil.test/auto> <mail@evil.test>",
    "https://evil.test/bare www.evil.test mail@evil.test",
    "# a heading",
    "\n## a heading\n",
    "> a quote",
    "- a list\n+ another\n* a third\n1. numbered\n2) too",
    "```\nfenced\n```",
    "~~~",
    "---",
    "===",
    "`tick` ``two``",
    "*em* _em_ **strong** __strong__ ~~strike~~ ~one~",
    "a | b || c",
    "evil\u202eoverride\u202c and \u2066isolate\u2069 \u200fmark",
    "bell\x07 esc\x1b[31m nul\x00 del\x7f c1\x85 sep\u2028 para\u2029",
    "&lt;b&gt; &#64;octocat &amp;",
    "\\<b>\\ trailing\\",
    "$x^2$ and $$y$$",
    "[x]: https://evil.test/ref",
    "    indented code",
    "<details><summary>s</summary>",
    "\r\n### heading after CRLF\r\n",
    "a\tb",
]
ALL = "\n".join(HOSTILE)  # every line-start trick at a line start
MENTION = re.compile(r"@(?=[A-Za-z0-9])")
URL = re.compile(r"://|\bwww\.", re.IGNORECASE)
PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def build(data: Callable[[str], str]) -> tuple[Report, GateOutcome]:
    """A report and a gate outcome with ``data(name)`` in every string a case, a check, the agent or a
    file supplies; the same shape whatever ``data`` gives."""
    ids = [data(f"case{i}") for i in range(4)]
    tag = data("tag")
    failing = CaseResult(
        id=ids[0],
        passed=False,
        tags=[tag],
        why=data("why"),
        checks=[
            CheckResult(name=data("check"), passed=False, detail=data("detail")),
            CheckResult(name=data("unchecked"), passed=None, detail=data("unchecked detail")),
        ],
        error=data("error"),
        stop=data("stop"),
        answer=data("answer"),
        trajectory=[data("tool a"), data("tool b")],
        requested=[data("requested")],
        trials=2,
        passes=1,
        divergence=Divergence(step=2, recorded=data("recorded tool"), actual=data("actual tool")),
        no_fixture=2,
        notes=[data("note")],
        no_fixture_calls=[
            NoFixtureCall(
                tool=data("nf tool"),
                reason=data("reason"),
                differs=[data("path")],
                args={data("arg"): data("value")},
                closest={data("arg"): data("closest")},
            )
        ],
        unused=1,
        unused_calls=[data("unused call")],
        recorded_calls=[Call(tool=data("rec tool"), args=data("rec args"))],
        calls=[Call(tool=data("call tool"), args=data("call args"), status=data("status"))],
        recorded_answer=data("recorded answer"),
    )
    drifted = CaseResult(
        id=ids[1],
        passed=True,
        tags=[tag],
        trials=2,
        passes=2,
        model=ModelServed(
            mode=data("mode"),
            served=1,
            recorded=2,
            drift=ModelDrift(step=1, what=[data("what")], changes=[data("change")]),
        ),
    )
    unservable = CaseResult(
        id=ids[2],
        passed=False,
        why=data("why 2"),
        trials=2,
        passes=0,
        model=ModelServed(mode="recorded", unservable=data("unservable")),
    )
    variant = CaseResult(
        id=ids[3],
        passed=False,
        trials=2,
        passes=0,
        tags=["recovery", f"recovery/{data('mode')}"],
        variant_of=ids[0],
        injected=Injected(tool=data("injected tool"), mode=data("injected mode")),
    )
    report = Report(
        suite=data("suite"),
        suite_version=data("version"),
        trials=2,
        shard=data("shard"),
        refused=1,
        refused_calls=[data("refused")],
        sealed=False,
        model=data("model"),
        results=[failing, drifted, unservable, variant],
    )
    comparison = Comparison(
        regressed=[ids[0]],
        changed=[ids[1]],
        inconclusive=[ids[2]],
        warnings=[data("warning")],
        decides={ids[2]: data("decides")},
        pass_to_fail=[ids[0]],
        fail_to_pass=[ids[1]],
        steps={ids[0]: (1, 2)},
        failed_too=[ids[2]],
    )
    gates = [GateResult(data("gate"), False, 0.5, data("gate detail")), GateResult(data("floor"), True, None, "")]
    return report, GateOutcome(gates=gates, regressions=[ids[0]], comparison=comparison)


def tokens(markdown: str) -> list[Token]:
    """Every token, inline children included, in document order."""
    out = []
    for t in PARSER.parse(markdown):
        out.append(t)
        out.extend(t.children or [])
    return out


def shape(markdown: str) -> list[str]:
    """The token types with runs of text joined: what the Markdown is made of, whatever its text says."""
    out: list[str] = []
    for t in tokens(markdown):
        if not (t.type == "text" and out and out[-1] == "text"):
            out.append(t.type)
    return out


def rendered(markdown: str) -> str:
    return " ".join(t.content for t in tokens(markdown) if t.type == "text")


def shown(value: str) -> str:
    """What a reader must see of ``value``: on one line, unseen characters as their escapes."""
    value = re.sub(r"\r\n|[\r\n\t]", " ", value).strip()
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"} else c for c in value)


@pytest.mark.parametrize("hostile", [ALL, *HOSTILE], ids=["all", *(repr(h)[1:20] for h in HOSTILE)])
def test_hostile_data_renders_as_text_in_the_markdown_summary(hostile):
    report, outcome = build(lambda name: f"{name} {hostile}")
    plain, plain_outcome = build(lambda name: name)
    for md, benign in (
        (report.to_markdown(outcome), plain.to_markdown(plain_outcome)),
        (report.to_markdown(), plain.to_markdown()),
    ):
        # the same Markdown as with harmless data: no node, heading, cell, emphasis or link of the data's
        assert shape(md) == shape(benign)
        types = {t.type for t in tokens(md)}
        assert not types & {"html_block", "html_inline", "link_open", "image", "code_inline", "code_block", "fence"}
        assert "<" not in md  # no tag, no comment, no autolink: harvester writes none either
        text = rendered(md)
        assert not MENTION.search(text), MENTION.search(text)
        assert not URL.search(text)
        assert not [c for c in text if c != JOINER and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}]
        # harvester's own lines still render after any field: the headings and the headline
        blocks = PARSER.parse(md)
        headings = [blocks[i + 1].content for i, t in enumerate(blocks) if t.type == "heading_open"]
        assert headings[0].startswith("harvester replay: suite") and "Failing cases" in headings
    # and the text reads as the data: the why, a check's detail, the suite, each whole on one line
    md = report.to_markdown(outcome)
    seen = rendered(md).replace(JOINER, "")
    for name in ("why", "detail", "suite", "decides", "warning", "gate detail", "change"):
        assert shown(f"{name} {hostile}") in seen, name


def test_what_harvester_writes_after_a_hostile_field_still_renders():
    """An unclosed comment, a fence or a quote in the last field must not swallow what follows it (the
    action appends the links and the exit code to the summary)."""
    report, outcome = build(lambda name: f"{name}\n<!-- ``` <details>\n> ")
    body = report.to_markdown(outcome) + "\n[run](https://github.com/o/r/actions/runs/7) · exit code 1\n"
    blocks = PARSER.parse(body)
    last = [t for t in blocks if t.type == "inline"][-1]
    assert [c.type for c in last.children or []][:3] == ["link_open", "text", "link_close"]
    assert last.content.endswith("exit code 1")
    strong = [t for t in tokens(body) if t.type == "strong_open"]
    assert strong  # the headline and the verdict are still bold


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        ("no_fixture calls", "no_fixture calls"),  # an underscore inside a word emphasizes nothing: kept
        ("_em_ a_", "\\_em\\_ a\\_"),
        ("<!--", "&lt;!--"),
        ("@team", "@" + JOINER + "team"),
        ("https://x", "https:" + JOINER + "//x"),
        ("# h", "\\# h"),
        ("1. x", "1\\. x"),
        ("a\u202eb", "a\\\\u202eb"),
        ("a\nb", "a b"),
        ("a|b", "a\\|b"),
    ],
)
def test_inert_escapes_only_what_would_act(text, markdown):
    assert inert(text) == markdown
