"""Properties of redaction over random keys, names and values with planted secrets of every kind.

Whatever a secret is planted in (a value, a dict key, an attribute name, a span, event or scope
name, the agent or a tool name), and whatever letter it is written right after, the redacted output
holds none of it; redacting again changes nothing; and the same input always gives the same output
(fixture keys are made from redacted tool names and args, so they must not drift).
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harvester.model import Message, ToolRequest
from harvester.redact import Redactor
from harvester.spans import SpanData
from tests.builders.runs import call, run

R = Redactor(key="")
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


def _random(size: int, alphabet: str = ALNUM) -> st.SearchStrategy[str]:
    """A random token of ``size`` characters holding a digit, an upper and a lower-case letter (as
    generated keys do) when the alphabet has them."""
    seeds = [c for c in ("7", "Q", "m") if c in alphabet]
    return st.text(alphabet, min_size=size - len(seeds), max_size=size - len(seeds)).map(lambda t: "".join(seeds) + t)


def _luhn(digits: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(digits + "0")):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return digits + str((10 - total % 10) % 10)


def _planted(fmt: str, *parts: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, str]]:
    """(text, secret): ``fmt`` with ``{}`` filled by the parts, the secret being the last part."""
    return st.tuples(*parts).map(lambda ps: (fmt.format(*ps), ps[-1]))


# Tokens that stand alone: found after any letter.
TOKENS = st.one_of(
    _random(24).map(lambda t: ("sk-proj-" + t, t)),
    _random(36).map(lambda t: ("ghp_" + t, t)),
    _random(16, string.ascii_uppercase + string.digits).map(lambda t: ("AKIA" + t, t)),
    _random(24).map(lambda t: ("xoxb-1234567890-" + t, t)),
    _random(35).map(lambda t: ("AIza" + t, t)),
    _random(24).map(lambda t: ("sk_live_" + t, t)),
    _random(34).map(lambda t: ("hf_" + t, t)),
    _random(12).map(lambda t: (f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.{t}", t)),
    _random(20).map(lambda t: ("glpat-" + t, t)),
    st.tuples(_random(22), _random(43)).map(lambda ts: (f"SG.{ts[0]}.{ts[1]}", ts[1])),
    _random(36).map(lambda t: ("npm_" + t, t)),
    st.tuples(st.sampled_from(["SK", "AC"]), _random(32, HEX)).map(lambda ts: (ts[0] + ts[1], ts[1])),
    st.text(string.ascii_lowercase, min_size=3, max_size=10).map(lambda u: (f"{u}@mail-{u}.com", f"{u}@mail-{u}.com")),
)
# Secrets told by the words around them ("password is ...", "AccountKey=..."), and card numbers (a
# digit before one makes it another number).
TOLD = st.one_of(
    st.text(string.digits, min_size=15, max_size=15).map(lambda d: (_luhn("4" + d), _luhn("4" + d))),  # a card
    _planted("-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----", _random(40)),
    _planted("aws_secret_access_key={}", _random(40, ALNUM + "/+")),
    _planted("AWS secret {}", _random(40, ALNUM + "/+")),
    _planted("Twilio auth token {}", _random(32, HEX)),
    _planted("AccountName=acme;AccountKey={}==;EndpointSuffix=core.windows.net", _random(30)),
    _planted("SharedAccessKeyName=Root;SharedAccessKey={}=", _random(30)),
    _planted("https://hooks.slack.com/services/T0ABC1234/B0DEF5678/{}", _random(24)),
    _planted("password is {}", _random(10)),
    _planted("密码是{}", _random(10)),
    _planted("пароль: {}", _random(10)),
    _planted("api_key={}", _random(16)),
    _planted("Bearer {}", _random(24)),
    _planted("https://admin:{}@db.internal/x", _random(12)),
)
LETTERS = ["", " ", "我的密钥是", "APIキーは", "ключ", "token", "Schlüssel", "5"]
SEPARATORS = ["", " ", "我的", "ключ ", "\n", "key: "]
JUNK = st.text(st.characters(codec="utf-8", exclude_characters="\\<>\"'"), max_size=8)


@st.composite
def planted(draw: st.DrawFn) -> tuple[str, str]:
    """(text, secret): a secret of any kind, right after a letter or a separator, amid junk."""
    if draw(st.booleans()):
        text, secret = draw(TOKENS)
        before = draw(st.sampled_from(LETTERS))
    else:
        text, secret = draw(TOLD)
        before = draw(st.sampled_from(SEPARATORS))
    head = draw(JUNK)
    # " | " apart from the junk: a digit next to a card number would make it another number.
    return f"{head} | {before}{text} | {draw(JUNK)}" if head else f"{before}{text}", secret


def _strings(v: Any) -> Iterator[str]:
    """Every string in ``v``: values, dict keys, and the fields of spans."""
    if isinstance(v, SpanData):
        yield from _strings(v.to_dict())
    elif isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _strings(k)
            yield from _strings(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _strings(x)


def _leaks(out: Any, secrets: list[str]) -> list[str]:
    return [s for s in _strings(out) for secret in secrets if secret in s]


def _spans(plants: list[tuple[str, str]]) -> list[SpanData]:
    texts = [t for t, _ in plants]
    a, b, c = (texts * 3)[:3]
    return [
        SpanData(
            "a" * 32,
            "b" * 16,
            None,
            a,
            scope=b,
            status_message=c,
            attributes={a: "v", "gen_ai.prompt": b, "payload": json.dumps({c: {b: a}}, ensure_ascii=False)},
            events=[{"name": b, "time_ns": 1, "attributes": {c: 1, "x": a}}],
            resource={"service.name": c, b: "x"},
        )
    ]


def _run_data(plants: list[tuple[str, str]]) -> Any:
    texts = [t for t, _ in plants]
    a, b, c = (texts * 3)[:3]
    r = run(
        call(a, args={b: c, "q": a}, result={c: b}),
        prompt=b,
        history=[
            Message(role="user", content=c),
            Message(role="assistant", tool_calls=[ToolRequest(name=b, args={a: 1})]),
        ],
    )
    return r.model_copy(update={"agent": c}).to_data()


PLANTS = st.lists(planted(), min_size=1, max_size=3)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(PLANTS)
def test_no_planted_secret_survives_in_span_names_keys_or_values(plants: list[tuple[str, str]]) -> None:
    out = R.redact_spans(_spans(plants))
    assert not _leaks(out, [s for _, s in plants]), out


@SETTINGS
@given(PLANTS)
@example([("0 | 40000000000000006 | @odata.", "40000000000000006")])  # a key holding "@odata." among other text
def test_no_planted_secret_survives_in_a_run(plants: list[tuple[str, str]]) -> None:
    out, _ = R.redact_data(_run_data(plants), [])
    assert not _leaks(out, [s for _, s in plants]), out


@SETTINGS
@given(PLANTS)
def test_redaction_is_idempotent(plants: list[tuple[str, str]]) -> None:
    spans = R.redact_spans(_spans(plants))
    assert R.redact_spans(spans) == spans
    data, _ = R.redact_data(_run_data(plants), [])
    assert R.redact_data(data, [])[0] == data


@pytest.mark.slow
@SETTINGS
@given(PLANTS, st.sampled_from(["", "k3y"]))
def test_redaction_is_deterministic(plants: list[tuple[str, str]], key: str) -> None:
    """A fresh redactor (no caches, another process) writes the same pseudonyms."""
    first, second = Redactor(key=key), Redactor(key=key)
    assert first.redact_spans(_spans(plants)) == second.redact_spans(_spans(plants))
    assert first.redact_data(_run_data(plants), [])[0] == second.redact_data(_run_data(plants), [])[0]
