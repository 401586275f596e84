"""The rule catalogue, format by format, and secrets in the places a value-only walk misses.

Issue #16: formats the catalogue did not know, secrets written right after a letter, and secrets in
keys and names (attribute names, JSON object keys, scope, agent, tool, span and event names).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harvester.canonical import fixture_key
from harvester.model import Message, ToolRequest
from harvester.redact import PLACEHOLDER, Redactor
from harvester.redact._rules import CASED, FOLDED
from harvester.spans import SpanData
from tests.builders.runs import call, run

R = Redactor(key="")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "redaction.md"

# (kind, text, the secret in it)
FORMATS = [
    (
        "private_key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq9s0Zx\n-----END RSA PRIVATE KEY-----",
        "MIIEpAIBAAKCAQEA7bq9s0Zx",
    ),
    (
        "private_key",
        "key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEA",
    ),
    ("aws_secret", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG"),
    ("aws_secret", "AWS: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG"),
    ("aws_secret", "the secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG"),
    ("gitlab_token", "use glpat-Ab3dEf6hIj9kLm2nOp5q to push", "glpat-Ab3dEf6hIj9kLm2nOp5q"),
    (
        "sendgrid_key",
        "SG.aB3dEf6hIj9kLm2nOp5qRs.tUvWxYz0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ0",
        "tUvWxYz0123456789aBcDeFgHiJ",
    ),
    ("npm_token", "//registry.npmjs.org/:_authToken npm_aB3dEf6hIj9kLm2nOp5qRsTuVwXyZ0123456", "aB3dEf6hIj9kLm2n"),
    ("twilio", "key SK0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    ("twilio", "account AC0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    ("twilio", "Twilio auth token 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    (
        "azure_key",
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5==;EndpointSuffix=x",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5",
    ),
    (
        "azure_key",
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=aBc123DeF456gHi789=",
        "aBc123DeF456gHi789",
    ),
    (
        "slack_webhook",
        "post to https://hooks.slack.com/services/T0ABC1234/B0DEF5678/aBcDeFgHiJkLmNoPqRsTuVwX",
        "aBcDeFgHiJkLmNoPqRsTuVwX",
    ),
    ("password", "my password is hunter2!", "hunter2"),
    ("password", "the password was Tr0ub4dor&3.", "Tr0ub4dor&3"),
    ("password", "mi contraseña es gato123", "gato123"),
    ("password", "le mot de passe est chat123", "chat123"),
    ("password", "das Passwort ist hund123", "hund123"),
    ("password", "a senha é gato123", "gato123"),
    ("password", "пароль: кот123", "кот123"),
    ("password", "密码是hunter2", "hunter2"),
    ("password", "パスワードはneko123", "neko123"),
    ("password", "비밀번호는 abc123!", "abc123"),
]


@pytest.mark.parametrize(("kind", "text", "secret"), FORMATS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(FORMATS)])
def test_every_format_becomes_a_placeholder_of_its_own_kind(kind: str, text: str, secret: str) -> None:
    out = R.redact_text(text)
    assert secret not in out, out
    assert f"<{kind}:" in out, out
    assert R.redact_text(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "the password is incorrect",
        "your password is required.",
        "task-assignment-for-customer-42",
        "risk-assessment-2024-q1-report",
        "fixed in commit 3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c, secret rotated",
        "ACCOUNT 0123456789abcdef0123456789abcdef",
        "the msg.content field",
        "laws of physics, 40 chars: abcdefghijklmnopqrstuvwxyzabcdefghijklmn",
    ],
)
def test_ordinary_text_stays(text: str) -> None:
    assert R.redact_text(text) == text


def test_the_docs_list_every_kind_the_catalogue_writes() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", DOCS.read_text(), re.M))
    kinds = {"secret" if kind == "credential" else kind for kind, _, _ in CASED + FOLDED} | {"card"}
    assert documented == kinds


# Each built-in kind, as a secret a prefix letter could stick to.
TOKENS = [
    "sk-proj-Ab3dEf6hIj9kLm2nOp5q",
    "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5q",
    "ghp_Ab3dEf6hIj9kLm2nOp5qRs7tUv8wXy",
    "github_pat_11Ab3dEf6hIj9kLm2nOp5q",
    "AKIAIOSFODNN7EXAMPL3",
    "ASIAIOSFODNN7EXAMPL3",
    "xoxb-123456789012-Ab3dEf6hIj9kLm",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "sk_live_Ab3dEf6hIj9kLm2nOp5q",
    "sk_test_Ab3dEf6hIj9kLm2nOp5q",
    "hf_Ab3dEf6hIj9kLm2nOp5qRs7tUv8wXy01",
    "glpat-Ab3dEf6hIj9kLm2nOp5q",
    "SG.aB3dEf6hIj9kLm2nOp5qRs.tUvWxYz0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ0",
    "npm_aB3dEf6hIj9kLm2nOp5qRsTuVwXyZ0123456",
    "SK0123456789abcdef0123456789abcdef",
    "AC0123456789abcdef0123456789abcdef",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.Ab3dEf6hIj9k",
    "bob.smith@example.com",
    "4111 1111 1111 1111",
]
PREFIXES = ["我的密钥是", "APIキーは", "ключ", "token", "Schlüssel"]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("token", TOKENS)
def test_a_secret_right_after_a_letter_is_found(prefix: str, token: str) -> None:
    out = R.redact_text(prefix + token)
    assert token not in out and PLACEHOLDER.search(out), out


@pytest.mark.parametrize("prefix", ["我的", "ключ "])
def test_a_key_value_pair_right_after_a_letter_is_found(prefix: str) -> None:
    out = R.redact_text(prefix + "api_key=Zx9Yw8Vu7")
    assert "Zx9Yw8Vu7" not in out, out


SECRET = "sk-proj-Ab3dEf6hIj9kLm2nOp5q"
EMAIL = "bob.smith@example.com"


def _span(**kw: object) -> SpanData:
    return SpanData("a" * 32, "b" * 16, None, kw.pop("name", "chat"), **kw)  # type: ignore[arg-type]


def test_attribute_names_json_keys_scope_span_and_event_names_are_redacted() -> None:
    spans = [
        _span(
            name=f"call {SECRET}",
            scope=f"acme.{SECRET}",
            attributes={f"x.{SECRET}": "v", "payload": json.dumps({f"note {SECRET}": 1, EMAIL: {"a": 1}})},
            events=[{"name": f"sent to {EMAIL}", "time_ns": 1, "attributes": {f"k {SECRET}": 1}}],
            resource={f"service {SECRET}": "x"},
        )
    ]
    (out,) = R.redact_spans(spans)
    text = repr(out)
    assert SECRET not in text and EMAIL not in text, text
    assert isinstance(json.loads(out.attributes["payload"]), dict)  # still valid JSON, keys renamed
    assert R.redact_spans([out]) == [out]


def test_agent_tool_and_requested_tool_names_and_history_are_redacted() -> None:
    r = run(
        call(f"lookup_{SECRET}", args={"q": "x"}),
        history=[
            Message(role="user", content=f"my key is {SECRET}"),
            Message(role="assistant", tool_calls=[ToolRequest(name=f"t {EMAIL}", args={EMAIL: 1})]),
        ],
    ).model_copy(update={"agent": EMAIL})
    data = r.to_data()
    out, _ = R.redact_data(data, [])
    text = json.dumps(out)
    assert SECRET not in text and EMAIL not in text, text
    assert R.redact_run(r).to_data() == out


def test_a_redacted_tool_name_gives_the_same_fixture_key_every_time() -> None:
    r = run(call(f"lookup_{SECRET}", args={f"key {SECRET}": "x"}))
    keys = set()
    for redactor in (R, Redactor(key="")):
        (c,) = redactor.redact_run(r).calls
        keys.add(fixture_key(c.name, c.args))
    assert len(keys) == 1 and SECRET not in keys.pop()
