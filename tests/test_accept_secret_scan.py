"""The secret scan before a case is accepted (issue #16): ``accept`` and ``review``'s accept refuse a case
a redaction rule still matches, naming its fields, exit 2, nothing moved; ``--force`` accepts it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester.canonical import fixture_key
from harvester.case import AgentCase, CaseFolder, Fixture, Recorded, load_case, save_case
from harvester.cli import main
from harvester.errors import InputError
from harvester.model import Message

API_KEY = "sk-proj-abcdefghijklmnopqrstuvwx1234"


def fx(tool: str, args=None, result=None, error=None) -> Fixture:
    return Fixture(key=fixture_key(tool, args), tool=tool, args=args, result=result, error=error)


def leaky_case(case_id: str = "reset-password", **kw) -> AgentCase:
    fields: dict = dict(
        id=case_id,
        why="a reset must not leak the key",
        prompt="Reset the password of my account",
        fixtures=[
            Fixture(key=fixture_key("kb_search", {"q": "reset"}), tool="kb_search", args={"q": "reset"}, result="ok"),
            Fixture(
                key=fixture_key("get_user", {"id": 7}),
                tool="get_user",
                args={"id": 7},
                result={"name": "Bob", "api": f"use {API_KEY}"},
            ),
        ],
        recorded=Recorded(answer="Done; mail bob@example.com if it fails"),
    )
    fields.update(kw)
    return AgentCase(**fields)


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    root = tmp_path / "cases"
    save_case(leaky_case(), root / "pending")
    return root


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_accept_refuses_a_case_a_rule_matches_naming_each_field(cases):
    before = (cases / "pending/reset-password.json").read_bytes()
    result = invoke("accept", "reset-password", "--cases", str(cases))
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and "reset-password.json" in line
    assert "fixtures[1].result, recorded.answer" in line and "--force" in line
    assert "fixtures[0]" not in line and "prompt" not in line
    assert API_KEY not in line  # the refusal names fields, never prints the secret
    assert (cases / "pending/reset-password.json").read_bytes() == before and not (
        cases / "reset-password.json"
    ).exists()


def test_force_accepts_it(cases):
    result = invoke("accept", "reset-password", "--force", "--cases", str(cases))
    assert result.exit_code == 0, result.output
    assert load_case(cases / "reset-password.json").status == "accepted"


@pytest.mark.parametrize(
    ("field", "update"),
    [
        ("prompt", {"prompt": "my key is " + API_KEY}),
        ("history[1]", {"history": [Message(role="user", content="hi"), Message(role="user", content=API_KEY)]}),
        ("expected", {"expected": "write to alice@example.com"}),
        ("fixtures[0].args", {"fixtures": [fx("k", {"password": "hunter22"})]}),
        ("fixtures[0].error", {"fixtures": [fx("k", error={"type": "auth", "message": API_KEY})]}),
    ],
)
def test_each_scanned_field_is_named(tmp_path, field, update):
    base = leaky_case(fixtures=[], recorded=Recorded())
    folder = CaseFolder(tmp_path)
    save_case(base.model_copy(update=update), tmp_path / "pending")
    assert folder.secret_fields(folder.load("reset-password")) == [field]
    with pytest.raises(InputError, match=f"in {re.escape(field)}:"):
        folder.accept("reset-password")


def test_a_redacted_case_is_accepted(tmp_path):
    clean = leaky_case(
        fixtures=[fx("k", {"token": "<secret:03aafb02>"}, "mail <email:5ff860bf>")],
        recorded=Recorded(answer="ok"),
    )
    save_case(clean, tmp_path / "pending")
    assert CaseFolder(tmp_path).accept("reset-password").parent == tmp_path


def test_the_projects_own_patterns_are_scanned(tmp_path):
    (tmp_path / "harvester.toml").write_text("[redact]\npatterns = { account = 'ACC-\\d{8}' }\n")
    save_case(leaky_case(fixtures=[], recorded=Recorded(), prompt="close ACC-12345678"), tmp_path / "cases/pending")
    result = invoke("accept", "reset-password", "--config", str(tmp_path / "harvester.toml"))
    assert result.exit_code == 2 and "in prompt:" in result.output


def test_the_projects_field_rules_are_scanned_on_their_tools_fixtures(tmp_path):
    """A field rule names a value no pattern recognises (an SSN in ``result.ssn``): the scan applies it to
    that tool's fixtures, so a case captured before the rule was added is refused (before: accepted)."""
    (tmp_path / "harvester.toml").write_text('[redact.fields]\nget_customer = ["result.ssn"]\n')
    customer = fx("get_customer", {"id": 7}, {"name": "Bob", "ssn": "078-05-1120"})
    other = fx("get_order", {"id": 7}, {"ssn": "not this tool's rule"})
    save_case(leaky_case(fixtures=[other, customer], recorded=Recorded()), tmp_path / "cases/pending")
    result = invoke("accept", "reset-password", "--config", str(tmp_path / "harvester.toml"))
    assert result.exit_code == 2, result.output
    assert "in fixtures[1].result:" in result.output
    redacted = customer.model_copy(update={"result": {"name": "Bob", "ssn": "<ssn:1a2b3c4d>"}})
    save_case(leaky_case("redacted", fixtures=[other, redacted], recorded=Recorded()), tmp_path / "cases/pending")
    result = invoke("accept", "redacted", "--config", str(tmp_path / "harvester.toml"))
    assert result.exit_code == 0, result.output


def test_review_does_not_accept_it_and_exits_2(cases):
    result = invoke("review", "--cases", str(cases), input="a\ns\n")
    assert result.exit_code == 2, result.output
    assert "not accepted: a redaction rule still matches fixtures[1].result, recorded.answer" in result.output
    assert (
        result.output.strip().splitlines()[-1].startswith("error: not accepted") and "reset-password" in result.output
    )
    assert load_case(cases / "pending/reset-password.json").status == "pending"
    assert not (cases / "reset-password.json").exists()


def test_review_rejecting_a_refused_case_is_a_clean_review(cases):
    result = invoke("review", "--cases", str(cases), input="a\nr\nleaks\n")
    assert result.exit_code == 0, result.output
    assert (cases / "rejected/reset-password.json").exists()


def test_review_force_accepts_it(cases):
    result = invoke("review", "reset-password", "--force", "--cases", str(cases), input="a\n")
    assert result.exit_code == 0, result.output
    assert load_case(cases / "reset-password.json").status == "accepted"
