"""Redaction rules, pseudonyms, and what a redacted run and its raw spans look like."""

from __future__ import annotations

import re

import orjson
import pytest

from harvester.canonical import args_hash
from harvester.model import ErrorInfo, LlmCall, Run, ToolCall, ToolRequest
from harvester.redact import PLACEHOLDER, Redactor, luhn_ok
from harvester.spans import SpanData

R = Redactor(key=None)

SECRETS = {
    "openai": "sk-proj-Abcdefghijklmnopqrstuvwx0123",
    "anthropic": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJ0123",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-123456789012-abcdefghijkl",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_api_keys(name: str) -> None:
    out = R.redact_text(f"use {SECRETS[name]} now")
    assert SECRETS[name] not in out
    assert re.fullmatch(r"use <api_key:[0-9a-f]{8}> now", out)


@pytest.mark.parametrize(
    "text,kept,gone",
    [
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "Authorization: Bearer <token:", "eyJhbGci"),
        ("https://bob:hunter2@db.example.com/orders", "https://bob:<password:", "hunter2"),
        ("write to jane.doe+shop@example.co.uk today", "write to <email:", "jane.doe"),
        ("api_key=abcd1234efgh&page=2", "api_key=<secret:", "abcd1234efgh"),
        ('password: "correct horse battery"', 'password: "<secret:', "correct horse"),
        ("OPENAI_API_KEY=zzzz9999", "OPENAI_API_KEY=<secret:", "zzzz9999"),
        ("card 4111 1111 1111 1111 exp 12/29", "card <card:", "4111 1111"),
        ("card 4111-1111-1111-1111", "card <card:", "4111-1111"),
        ("amex 378282246310005.", "amex <card:", "378282246310005"),
        ("card 4111 1111 1111 1111 2 times", "card <card:", "4111 1111"),  # a digit after it (before: kept)
        ("line 2 4111-1111-1111-1111", "line 2 <card:", "4111-1111"),
    ],
)
def test_builtin_rules(text: str, kept: str, gone: str) -> None:
    out = R.redact_text(text)
    assert out.startswith(kept) and gone not in out


@pytest.mark.parametrize(
    "text",
    [
        "task-assignment-for-customer-42",  # "sk-" inside a word
        "order A1001 shipped 2026-11-03, call +1 555-123-4567",
        "card 4111 1111 1111 1112",  # fails Luhn
        "pairs 12 41 11 11 11 11 11 11 11",  # 4111111111111111 inside, but groups of 2 digits are no card
        "gen_ai.usage.input_tokens: 1200",
        "the key to success",
        "",
        "ok",
    ],
)
def test_clean_text_untouched(text: str) -> None:
    assert R.redact_text(text) is text or R.redact_text(text) == text


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and luhn_ok("378282246310005") and not luhn_ok("4111111111111112")


def test_pseudonyms_are_deterministic_and_keyed() -> None:
    a = R.redact_text("mail bob@example.com")
    assert a == Redactor().redact_text("reach bob@example.com").replace("reach", "mail")
    assert a != R.redact_text("mail alice@example.com")
    keyed = Redactor(key="k1").redact_text("mail bob@example.com")
    assert keyed != a and keyed == Redactor(key=b"k1").redact_text("mail bob@example.com")


def test_idempotent() -> None:
    once = R.redact_text("api_key=abcd1234 and bob@example.com")
    assert R.redact_text(once) == once


def test_non_ascii_and_surrogates() -> None:
    assert "secret123" not in R.redact_text("İstanbul password=secret123")
    weird = "caf\udce9 bob@example.com"
    assert "bob@" not in R.redact_text(weird)
    assert R.redact_value(b"mail bob@example.com").startswith("mail <email:")


def test_structured_values_and_secret_keys() -> None:
    value = {
        "api_key": "short",
        "n": 4111111111111111,
        "nested": [{"to": "a@b.example"}],
        "input_tokens": 3,
        "ok": True,
        "count": 12,
    }
    out = R.redact_value(value)
    assert PLACEHOLDER.fullmatch(out["api_key"]) and PLACEHOLDER.fullmatch(out["n"])
    assert out["nested"][0]["to"].startswith("<email:")
    assert out["input_tokens"] == 3 and out["ok"] is True and out["count"] == 12
    assert value["api_key"] == "short"  # the input is not mutated
    clean = {"a": [1, "x"], "b": {"c": "hello"}}
    assert R.redact_value(clean) is clean


def test_custom_patterns_and_groups() -> None:
    r = Redactor(patterns={"order": r"\bA\d{4}\b", "ssn": r"ssn (\d{3}-\d{2}-\d{4})"})
    out = r.redact_text("order A1001, ssn 123-45-6789")
    assert re.fullmatch(r"order <order:[0-9a-f]{8}>, ssn <ssn:[0-9a-f]{8}>", out)
    assert Redactor(patterns=[r"zebra"]).redact_text("a zebra").startswith("a <custom:")
    assert Redactor(patterns=[r"zebra"], builtin=False).redact_text("bob@example.com") == "bob@example.com"


def _run() -> Run:
    return Run(
        trace_id="a" * 32,
        run_id="b" * 16,
        prompt="I am bob@example.com",
        answer="sent to bob@example.com",
        stop="error",
        error=ErrorInfo(type="Boom", message="token=abcdef123456 leaked"),
        calls=[
            ToolCall(
                name="get_customer",
                call_id="c1",
                args={"email": "bob@example.com", "card": "4111111111111111"},
                result={"ssn": "123-45-6789", "name": "Bob"},
            ),
            ToolCall(name="kb_search", args={"query": "refunds"}, result="Refunds within 30 days."),
        ],
        llm_calls=[LlmCall(requests=[ToolRequest(name="get_customer", args={"email": "bob@example.com"})])],
    )


def test_redact_run_and_field_paths() -> None:
    r = Redactor(fields={"get_customer": ["result.ssn", "args.card"]})
    run = _run()
    out = r.redact_run(run)
    dump = out.model_dump_json()
    for secret in ("bob@example.com", "123-45-6789", "4111111111111111", "abcdef123456"):
        assert secret not in dump
    assert out.calls[0].result["ssn"].startswith("<ssn:") and out.calls[0].args["card"].startswith("<card:")
    assert out.calls[0].result["name"] == "Bob"
    assert out.calls[1] is run.calls[1]  # untouched calls are shared
    # same value, same placeholder: the redacted args hash is stable across runs
    again = r.redact_run(_run())
    assert args_hash(again.calls[0].args) == args_hash(out.calls[0].args)
    assert out.llm_calls[0].requests[0].args["email"] == out.calls[0].args["email"]
    assert run.prompt == "I am bob@example.com"  # the input run is not mutated


def test_field_path_into_json_string_result() -> None:
    r = Redactor(fields={"t": ["result.ssn"]})
    run = Run(trace_id="a" * 32, calls=[ToolCall(name="t", result='{"ssn": "123-45-6789", "x": 1}')])
    out = r.redact_run(run)
    assert "123-45-6789" not in out.calls[0].result and "<ssn:" in out.calls[0].result


def test_bad_field_path() -> None:
    with pytest.raises(ValueError, match="must start with args"):
        Redactor(fields={"t": ["ssn"]})


def test_redact_trace_chases_field_values_into_spans() -> None:
    r = Redactor(fields={"get_customer": ["result.ssn"]})
    span = SpanData(
        trace_id="a" * 32,
        span_id="c" * 16,
        parent_id=None,
        name="execute_tool get_customer",
        status="ERROR",
        status_message="failed for bob@example.com",
        attributes={
            "gen_ai.tool.call.result": '{"ssn": "123-45-6789", "name": "Bob"}',
            "n": 3,
            "http.request.header.authorization": ["Bearer abcdefghijkl"],
        },
        events=[{"name": "exception", "time_ns": 1, "attributes": {"exception.message": "sk-" + "x" * 30}}],
        resource={"service.owner": "ops@example.com"},
    )
    (run,), (out,) = r.redact_trace([_run()], [span])
    blob = repr(out.to_dict())
    for secret in ("123-45-6789", "bob@example.com", "abcdefghijkl", "x" * 30, "ops@example.com"):
        assert secret not in blob
    assert out.attributes["n"] == 3
    assert r.redact_spans([span])[0].status_message.startswith("failed for <email:")


def test_from_option() -> None:
    assert Redactor.from_option(False) is None and Redactor.from_option(None) is None
    assert isinstance(Redactor.from_option(True), Redactor)
    r = Redactor()
    assert Redactor.from_option(r) is r
    assert Redactor.from_option({"patterns": [r"zz"]}).redact_text("a zz").startswith("a <custom:")
    with pytest.raises(TypeError):
        Redactor.from_option(3)  # type: ignore[arg-type]


def test_short_value_cached_unchanged_is_still_chased_by_a_field_rule() -> None:
    """A short attribute value answered from the cross-pass cache must not skip a field rule's literal."""
    from harvester.conventions import run_data_from_spans
    from harvester.spans import SpanData

    tid = "ab" * 16
    spans = [
        SpanData(
            tid,
            "1" * 16,
            None,
            "invoke_agent a",
            1,
            10,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "a",
                "note": "order ZX99123 shipped",
            },
        ),
        SpanData(
            tid,
            "2" * 16,
            "1" * 16,
            "execute_tool lookup",
            2,
            3,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.arguments": '{"order": "ZX99123"}',
                "gen_ai.tool.call.result": "fine",
            },
        ),
    ]
    red = Redactor(fields={"lookup": ["args.order"]})
    assert red.redact_value({"note": "order ZX99123 shipped"}) == {"note": "order ZX99123 shipped"}  # now cached
    (data,) = run_data_from_spans(spans)
    out, out_spans = red.redact_data(data, spans)
    ph = out["calls"][0]["args"]["order"]
    assert ph.startswith("<order:")
    assert out_spans[0].attributes["note"] == f"order {ph} shipped"


def test_a_field_rule_value_is_chased_into_the_answer_and_other_calls() -> None:
    """The SSN a field rule hides in get_customer's result must not survive in the answer or a later call."""
    from harvester.model import Run, ToolCall

    red = Redactor(fields={"get_customer": ["result.ssn"]})
    run = Run(
        trace_id="t",
        prompt="What is my SSN?",
        answer="Your SSN is 123-45-6789.",
        stop="answered",
        calls=[
            ToolCall(name="send_note", args={"text": "ssn 123-45-6789"}),
            ToolCall(name="get_customer", args={"id": 7}, result={"ssn": "123-45-6789", "name": "Ann"}),
        ],
    )
    out = red.redact_run(run)
    assert "123-45-6789" not in out.to_json().decode()
    placeholder = out.calls[1].result["ssn"]
    assert placeholder.startswith("<ssn:") and out.answer == f"Your SSN is {placeholder}."
    assert out.calls[0].args == {"text": f"ssn {placeholder}"}
    data, _ = red.redact_data(run.model_dump(mode="json"), [])
    assert "123-45-6789" not in str(data)


def test_json_payloads_are_redacted_as_data_and_stay_json() -> None:
    payload = orjson.dumps(
        {
            "q": "x",
            "cookie": "sessionid=q8Zr55Lk",
            "Authorization": "tok9Kx77Qw",
            "card": 4111111111111111,
            "bob@example.com": 1,
            "n": 7,
        }
    ).decode()
    out = orjson.loads(R.redact_text(payload))
    assert out["q"] == "x" and out["n"] == 7
    assert out["cookie"].startswith("<secret:") and out["Authorization"].startswith("<secret:")
    assert out["card"] == R.pseudonym("card", "4111111111111111")
    assert [k for k in out if k.startswith("<email:")]  # a key can be personal data too
    clean = '{"query": "refund policy", "limit": 3}'
    assert R.redact_text(clean) is clean


def test_json_inside_json_is_redacted_at_every_level() -> None:
    """OpenAI-style messages carry tool arguments as a JSON string inside the JSON payload."""
    inner = orjson.dumps({"password": "hunter2pass", "card": 4111111111111111}).decode()
    payload = orjson.dumps([{"role": "assistant", "tool_calls": [{"function": {"arguments": inner}}]}]).decode()
    out = R.redact_text(payload)
    assert "hunter2pass" not in out and "4111111111111111" not in out
    args = orjson.loads(orjson.loads(out)[0]["tool_calls"][0]["function"]["arguments"])
    assert args["password"].startswith("<secret:") and args["card"].startswith("<card:")


def test_text_that_only_looks_like_json_gets_the_text_rules() -> None:
    out = R.redact_text("{not json} password=hunter2pass, mail bob@example.com")
    assert "hunter2pass" not in out and "bob@" not in out


def test_user_patterns_written_against_raw_json_still_match() -> None:
    red = Redactor(patterns={"ssn": r'"ssn":\s*"([^"]+)"'})
    out = red.redact_text('{"ssn": "123-45-6789", "name": "Ann"}')
    assert "123-45-6789" not in out and out.startswith('{"ssn": "<ssn:')


def test_text_rules_see_through_escapes_and_quoted_keys() -> None:
    """Payloads that are not JSON (a Python repr, an escaped error message) still lose their secrets."""
    assert "Pp0Lq9Zz" not in R.redact_text("{'cookie': 'sid=Pp0Lq9Zz', 'authorization': 'Token abcd1234'}")
    assert "abcd1234" not in R.redact_text("{'authorization': 'Token abcd1234'}")
    assert "Zq81mmXk77" not in R.redact_text("Error running tool: {'error': 'bad\\napi_key=Zq81mmXk77'}")
    assert "sk-proj-" not in R.redact_text("hello\\nsk-proj-AAAAbbbbCCCCddddEEEE")


def test_json_with_leading_space_or_surrogates_is_still_redacted_as_data() -> None:
    """What the conventions readers parse as JSON, the redactor must too, or the run gets the clear value."""
    for payload in ('\n{"q": "x", "cookie": "sessionid=q8Zr55Lk"}', '{"q": "x\udcff", "cookie": "sessionid=q8Zr55Lk"}'):
        out = R.redact_text(payload)
        assert "q8Zr55Lk" not in out and orjson.loads(out)["cookie"].startswith("<secret:")


def test_secret_named_keys_hide_any_value() -> None:
    out = R.redact_value(
        {
            "password": 83724519,
            "headers": {"Cookie": ["sessionid=Pp0Lq9Zz"]},
            "token": None,
            "card": 4111111111111111.0,
            "bob@example.com": True,
            "max_tokens": 512,
        }
    )
    assert out["password"].startswith("<secret:") and out["headers"]["Cookie"].startswith("<secret:")
    assert out["token"] is None and out["card"].startswith("<card:") and out["max_tokens"] == 512
    assert [k for k in out if k.startswith("<email:")]


def test_basic_needs_a_credential() -> None:
    assert R.redact_text("I only need basic troubleshooting steps") == "I only need basic troubleshooting steps"
    assert "YWxhZGRpbjpvcGVuc2VzYW1l" not in R.redact_text("Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l")


def test_patterns_and_field_values_that_hit_numbers_keep_the_json_valid() -> None:
    out = Redactor(patterns={"ssn": r"\b\d{9}\b"}).redact_text('{"order": 123456789, "n": 7}')
    assert orjson.loads(out) == {"order": Redactor().pseudonym("ssn", "123456789"), "n": 7}
    run = Run(trace_id="t", calls=[ToolCall(name="t", args={"ssn": 123456789, "n": 1})])
    spans = [
        SpanData(
            "ab" * 16,
            "2" * 16,
            None,
            "execute_tool t",
            attributes={"gen_ai.tool.call.arguments": '{"ssn": 123456789, "n": 1}'},
        )
    ]
    _, (span,) = Redactor(fields={"t": ["args.ssn"]}).redact_trace([run], spans)
    assert orjson.loads(span.attributes["gen_ai.tool.call.arguments"])["ssn"].startswith("<ssn:")


@pytest.mark.parametrize(
    "key",
    [
        "aws_secret_access_key",
        "accessKey",
        "awsSecretAccessKey",
        "db password",
        "API Token",
        "Client Secret",
        "x-api-key",
        "Set-Cookie",
    ],
)
def test_secret_key_names(key: str) -> None:
    assert R.redact_value({key: "wJalrXUtnFEMI"})[key].startswith("<secret:")


@pytest.mark.parametrize("key", ["max_tokens", "tokenizer", "secretName", "keyboard", "total_tokens"])
def test_not_secret_key_names(key: str) -> None:
    assert R.redact_value({key: "plain"}) == {key: "plain"}


def test_what_a_secret_name_does_not_hide() -> None:
    """Schemas, costs and OData annotations are data, not secrets: they must reach the run intact."""
    value = {
        "properties": {"password": {"type": "string"}, "api_key": {"type": "string"}},
        "required": ["password"],
        "input_cost_per_token": 3e-06,
        "members@odata.bind": ["https://x/1"],
    }
    assert R.redact_value(value) == value
    assert (
        orjson.loads(R.redact_text(orjson.dumps({**value, "mail": "bob@example.com"}).decode()))["properties"]
        == value["properties"]
    )


def test_numbers_are_replaced_only_whole() -> None:
    run = Run(
        trace_id="t",
        calls=[ToolCall(name="kb", args={"order_id": 1001}, result={"items": 21001, "total_ms": 1718010012345})],
    )
    out = Redactor(fields={"kb": ["args.order_id"]}).redact_run(run)
    assert out.calls[0].args["order_id"].startswith("<order_id:")
    assert out.calls[0].result == {"items": 21001, "total_ms": 1718010012345}
    assert Redactor(patterns={"ts": r"\d{10}"}).redact_value({"created": 1718010012345}) == {"created": 1718010012345}


def test_big_integers_survive_a_rewrite() -> None:
    out = R.redact_text('{"wei": 123456789012345678901234567890, "token": "abcdefgh1"}')
    assert '"wei":123456789012345678901234567890' in out and "abcdefgh1" not in out


def test_pathological_nesting_is_hidden_whole_and_never_raises() -> None:
    deep = "[" * 990 + '"reset my password"' + "]" * 990
    assert R.redact_text(deep).startswith("<payload:")
    deeper = '{"cookie": ["sid=8f14e45fceea167a"], "x": ' + "[" * 300 + "1" + "]" * 300 + "}"
    assert "8f14e45fceea167a" not in R.redact_text(deeper)


@pytest.mark.parametrize(
    "text,gone",
    [
        ("Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "9944b0"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA", "dXNlcjpw"),
        ("Cookie: theme=dark; sessionid=8f14e45fceea167a; csrftoken=abc", "8f14e45f"),
    ],
)
def test_header_values_are_hidden_whole(text: str, gone: str) -> None:
    assert gone not in R.redact_text(text)


@pytest.mark.parametrize("text", ["## BASIC SETTINGS", "Cookie: Chocolate Chip", "authorization: required"])
def test_header_words_that_are_not_credentials(text: str) -> None:
    assert R.redact_text(text) == text


@pytest.mark.parametrize(
    "secret",
    [
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",  # Google / Gemini
        "sk_live_51HxYzAbCdEfGhIjKlMnOp",
        "rk_test_51HxYzAbCdEfGhIjKlMnOp",  # Stripe
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",  # Hugging Face
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",  # a bare JWT
    ],
)
def test_more_key_shapes(secret: str) -> None:
    out = R.redact_text(f"config: {secret} end")
    assert secret not in out and out.startswith("config: <") and out.endswith(" end")


def test_azure_sas_signature() -> None:
    url = "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&sig=AbCdEfGhIjKlMnOpQrStUv%2Bw%3D&se=2026"
    out = R.redact_text(url)
    assert "AbCdEfGhIjKlMnOp" not in out and "&se=2026" in out


def test_span_and_event_names_are_redacted() -> None:
    span = SpanData(
        "ab" * 16,
        "1" * 16,
        None,
        "GET /reset?token=abcd1234efgh",
        events=[{"name": "mail bob@example.com", "time_ns": 1, "attributes": {}}],
    )
    (out,) = R.redact_spans([span])
    assert "abcd1234efgh" not in out.name and "bob@" not in out.events[0]["name"]


def test_the_names_of_the_agents_of_a_run_are_redacted_like_its_agent() -> None:
    """An agent may be named after its owner: the run's ``agents`` list says the same names again."""
    run = Run(trace_id="t", agent="bob@example.com", agents=["bob@example.com", "refunds_agent"])
    r = Redactor()
    out = r.redact_run(run)
    assert "bob@example.com" not in out.model_dump_json()
    assert out.agents == [out.agent, "refunds_agent"]
    data, _ = r.redact_data(run.to_data(), [])
    assert data["agents"] == [out.agent, "refunds_agent"]
