"""The redaction fast path (one scan of a trace's serialized values) must never differ from the walk.

The scan only decides to skip the walk; these properties hold it to that: whatever it lets through
unchanged, the walk would have left unchanged too.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.redact import Redactor
from harvester.redact._engine import Pass as _Pass
from harvester.redact._rules import card_runs as _card_runs
from harvester.redact._rules import card_shaped_bytes as _card_shaped_bytes
from harvester.redact._rules import clean_ascii as _clean_ascii
from harvester.redact._rules import maybe_secret as _maybe_secret
from harvester.redact._rules import no_card_in as _no_card_in
from harvester.spans import SpanData

R = Redactor(key="")

SECRETS = [
    "sk-proj-AAAAbbbbCCCCddddEEEEffff",
    "bob.secret@example.com",
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "api_key=abcd1234efgh5678",
    "Bearer abcdefgh12345678",
    "password: hunter2pass",
    "passwd=x9y8z7w6",
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAIOSFODNN7EXAMPLE",
    "https://admin:p4ssw0rd@db.local/x",
    "Cookie: sid=abc123def",
    "Authorization: Token 9944b09199c62bcf9418ad846dd0e4bb",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijkl",
    "ghp_0123456789abcdefghijABCDEFGHIJ0123",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "hf_abcdefghijklmnopqrstuvwxyz0123",
    "xoxb-123456789012-abcdefghijkl",
    "AIzaSyA1234567890abcdefghijklmnopqrstu",
    "sk_live_0123456789abcdefABCD",
    "?sv=2024&sig=abcdefghijklmnop1234%3D",
    "basic dXNlcjpwYXNzd29yZA==",
    "\u212aey: value1234",
    "TOKEN=abcdef123456",
    "client secret: s3cr3tvalue",
    "credentials=abc12345",
    '{"password": "hunter2pass"}',
    '{"Cookie": ["sessionid=abc123"]}',
    "COOKİE: session=abc123def",
    '{"COOKİE": "sessionid=q8Zx3kLm9"}',
    '{"cookıe": "sid=s3cr3t99"}',
    "4111 111 111 111 111",
    "BASİC dXNlcjpwYXNzd29yZA==",
]
FRAGMENTS = SECRETS + [
    "refunds within 30 days",
    "the key point",
    "ünïcödé",
    '[{"role": "user", "content": "hi"}]',
    '{"n": 4111111111111111}',
    '{"n": 4.111111111111111e+18}',
    "plain words",
    "",
    # card-shaped, no card: a UUID's groups, a timestamp, order numbers; and numbers beside a point or
    # an exponent, which a payload's walk reads as numbers
    "c04ae19f-fd2e-4382-9040-310c370b8b39",
    "order 4382-9040-3108 shipped",
    "1796020052163000000",
    '{"n": 4111111111111111.0}',
    '{"n": 4.111111111111111e15}',
    '{"n": 4111111111111111e0}',
    "4111 1111 1111 1112",
    '{"url": "https:\\/\\/hooks.slack.com\\/services\\/T0000000\\/B0000000\\/XXXXXXXXXXXXXXXX"}',
    "2 4111-1111-1111-1111",
]
KEYS = [
    "gen_ai.input.messages",
    "gen_ai.usage.input_tokens",
    "api_key",
    "apiKey",
    "accessToken",
    "password",
    "user.email",
    "bob@example.com",
    "members@odata.bind",
    "Authorization",
    "cookie",
    "x",
    "llm.token_count.prompt",
    "a_very_long_attribute_name_here",
]

texts = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(max_size=40),
    st.text(alphabet="0123456789 -.eE", min_size=12, max_size=30),
    st.lists(st.sampled_from(["4111", "1111", "4382", "9040", "310", "-", " ", "a", "."]), max_size=8).map("".join),
    st.lists(st.sampled_from(FRAGMENTS + ["a", "1234", "-", " "]), max_size=5).map(" ".join),
    st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join),
)
scalars = st.one_of(
    texts,
    st.integers(),
    st.integers(min_value=10**12, max_value=10**19),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=16))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)
attributes = st.dictionaries(
    keys,
    st.one_of(scalars, st.lists(texts, max_size=3), st.dictionaries(keys, values, max_size=3).map(json.dumps)),
    max_size=5,
)
spans = st.builds(
    lambda name, attrs, msg, events, res: SpanData(
        "a" * 32, "b" * 16, None, name, attributes=attrs, status_message=msg, events=events, resource=res
    ),
    texts,
    attributes,
    texts,
    st.lists(
        st.builds(lambda n, a: {"name": n, "time_ns": 1796020052163000000, "attributes": a}, texts, attributes),
        max_size=2,
    ),
    st.dictionaries(keys, scalars, max_size=3),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spans, min_size=1, max_size=4))
def test_the_fast_path_for_spans_gives_what_the_walk_gives(trace: list[SpanData]) -> None:
    p = _Pass()
    assert R.redact_spans(trace) == [R._span(s, p) for s in trace]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(values)
def test_values_the_scan_lets_through_are_values_the_walk_leaves_alone(value: object) -> None:
    if R._nothing_in(value, _Pass()):
        assert R.redact_value(value) == value


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, st.lists(texts, max_size=6).map(json.dumps), st.text(alphabet="0123456789 -Aa", max_size=40)))
def test_the_one_pass_ascii_scan_decides_as_the_card_test_and_the_triggers_do(text: str) -> None:
    """``clean_ascii`` folds case and digits in one translation; it must say exactly what the
    separate tests say of the same text, or a secret could pass the fast path."""
    raw = text.encode("utf-8", "surrogatepass")
    if raw.isascii():
        card = not _no_card_in(raw, _card_runs(raw))
        assert _clean_ascii(raw) == (not card and not _maybe_secret(text.lower()))


def test_a_card_shaped_uuid_in_the_resource_keeps_the_fast_path_and_a_card_does_not() -> None:
    """Every process's resource holds a random UUID (``service.instance.id``); one in seven has groups
    that look like a card's ("...-4382-9040-3101234567ab": 18 digits). The scan used to send every
    trace of such a process down the walk; it asks the card test itself now, and a real card still goes
    to the walk."""
    uuid = "c04ae19f-fd2e-4382-9040-3101234567ab"
    assert _card_shaped_bytes(uuid.encode())
    r = Redactor(key="")
    for resource, clean in (({"service.instance.id": uuid}, True), ({"card.note": "4111-1111-1111-1111"}, False)):
        trace = [SpanData("a" * 32, "b" * 16, None, "chat", attributes={"n": 1}, resource=resource)]
        assert r._spans_clean(trace, _Pass()) is clean
        assert r.redact_spans(trace) == [r._span(s, _Pass()) for s in trace]
    assert r.redact_spans(trace)[0].resource["card.note"].startswith("<card:")


def test_every_rule_and_secret_key_name_trips_the_scan() -> None:
    for text in [f for f in SECRETS if not f.startswith("4111")] + [
        "api_key",
        "apikey",
        "access-token",
        "id_token",
        "secret_key",
        "private key",
        "password",
        "passwd",
        "pwd",
        "authorization",
        "cookie",
        "credential",
    ]:
        assert _maybe_secret(text.lower()), text
        assert not _clean_ascii(text.encode()) or not text.isascii(), text
    assert not _maybe_secret("refunds are accepted within 30 days of delivery for unused items")
    assert _clean_ascii(b"refunds are accepted within 30 days of delivery for unused items")


def test_a_secret_behind_a_json_escape_is_found() -> None:
    """A Python app's json.dumps escapes non-ASCII, and a payload may escape anything ("\\u0040" is "@"):
    a reader unescapes it, so the redactor must not skip the payload for looking clean."""
    payload = '{"contact": "bob.smith\\u0040example.com", "note": "caf\\u00e9"}'
    span = SpanData("a" * 32, "b" * 16, None, "tool", attributes={"gen_ai.tool.call.result": payload})
    (out,) = R.redact_spans([span])
    result = json.loads(out.attributes["gen_ai.tool.call.result"])
    assert result["contact"].startswith("<email:") and result["note"] == "café"


def test_a_secret_behind_escaped_slashes_is_found() -> None:
    """Some JSON encoders escape every slash ("https:\\/\\/hooks.slack.com\\/services\\/..."), which a
    reader turns back into the webhook: the scan and the walk read such a payload as data, not as text."""
    webhook = "https://hooks.slack.com/services/T0000000/B0000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    payload = json.dumps({"url": webhook}).replace("/", "\\/")
    assert "hooks.slack.com/" not in payload and json.loads(payload)["url"] == webhook
    span = SpanData("a" * 32, "b" * 16, None, "tool", attributes={"gen_ai.tool.call.result": payload})
    r = Redactor(key="")
    (out,) = r.redact_spans([span])
    assert out == r._span(span, _Pass())
    assert "<slack_webhook:" in json.loads(out.attributes["gen_ai.tool.call.result"])["url"]
    assert "XXXXXXXX" not in str(out)


def test_letters_that_fold_to_ascii_and_cards_grouped_four_then_three_are_found() -> None:
    """A Turkish-locale upper-casing writes "COOKİE" (İ lowercases to i and a dot), and a card may be
    grouped 4-3-3-3-3: the scan must send both to the walk, which hides them."""
    for payload in ['{"headers": {"COOKİE": "sessionid=q8Zx3kLm9"}}', '{"cookıe": "sid=s3cr3t99"}']:
        span = SpanData("a" * 32, "b" * 16, None, "tool", attributes={"gen_ai.tool.call.arguments": payload})
        (out,) = R.redact_spans([span])
        assert "s3cr3t99" not in str(out) and "q8Zx3kLm9" not in str(out), out
    assert R.redact_text("COOKİE: session=abc123def").endswith(">")
    assert R.redact_text("card 4111 111 111 111 111").startswith("card <card:")


# -- long values found clean before -------------------------------------------------------------------
POLICY = "Refunds are accepted within 30 days of delivery for unused items in their packaging. " * 12


def _trace(**attributes: object) -> list[SpanData]:
    return [SpanData("a" * 32, "b" * 16, None, "execute_tool kb_search", attributes=dict(attributes))]


def test_a_long_value_found_clean_is_remembered_and_lets_nothing_else_through() -> None:
    """Every run repeats a system prompt, tool definitions, a policy a tool returns: a long value the
    scan found clean is not scanned again. It is remembered as the string itself, so a value that
    differs in one character, or a secret beside it, still goes through the scan and the walk."""
    r = Redactor(key="")
    clean = _trace(**{"tool.result": POLICY, "tool.query": "refund policy"})
    assert r.redact_spans(clean) == clean and POLICY in r._clean.known
    for secret in SECRETS:
        near = POLICY[:-40] + f" reach {secret} for more"  # as long, nearly the same
        for trace in (
            _trace(**{"tool.result": POLICY, "tool.note": near}),
            _trace(**{"tool.result": POLICY, "tool.query": secret}),
            _trace(**{"tool.result": near}),
        ):
            out = r.redact_spans(trace)
            assert out == [r._span(s, _Pass()) for s in trace] == Redactor(key="").redact_spans(trace), secret
    assert r._clean.known == {POLICY}


def test_the_remembered_values_are_bounded(monkeypatch) -> None:
    from harvester.redact import _fast_path

    monkeypatch.setattr(_fast_path, "MAX_CHARS", 4 * len(POLICY))
    r = Redactor(key="")
    for i in range(20):
        value = f"{i:04d} {POLICY}"
        assert r.redact_spans(_trace(**{"tool.result": value})) is not None
        assert r._clean.chars <= 4 * len(POLICY) and sum(map(len, r._clean.known)) == r._clean.chars
    assert 0 < len(r._clean.known) <= 4


long_texts = st.builds(
    lambda head, tail: head + POLICY + tail,
    st.one_of(texts, st.sampled_from(SECRETS)),
    st.one_of(texts, st.sampled_from(SECRETS)),
)


def test_a_card_in_groups_of_any_size_is_one_the_walk_and_the_scan_both_find() -> None:
    """13 to 19 digits with single separators that pass Luhn are a card whatever the groups: the walk's
    cheap test looked for four digits then three (or 13 in a row), so "38414-25-003799" was kept, unless
    another card-shaped run in the same value (a UUID's) sent it to the walk, where the scan kept it."""
    card = "38414-25-003799"
    for value in (card, f"order {card}", f"c04ae19f-fd2e-4382-9040-310c370b8b39 {POLICY} {card}"):
        trace = _trace(**{"tool.result": value})
        walked = [R._span(s, _Pass()) for s in trace]
        assert R.redact_spans(trace) == walked and card not in str(walked[0].attributes), value
        assert R.redact_text(value).endswith("<card:f0db6e9c>")


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(long_texts, min_size=1, max_size=3), min_size=2, max_size=5))
def test_runs_after_runs_through_one_redactor_get_what_the_walk_gives(runs: list[list[str]]) -> None:
    """One redactor for a stream of traces, as the processor has: whatever it remembered from the
    traces before, each trace comes out as the walk makes it."""
    r = Redactor(key="")
    for values in runs:
        trace = _trace(**{f"v{i}": v for i, v in enumerate(values)})
        assert r.redact_spans(trace) == [r._span(s, _Pass()) for s in trace]
