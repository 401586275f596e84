"""Order around a mutating call: a harvested case keeps the calls recorded before a refund before it.

The default ``trajectory_match`` (``superset``) ignores order, so an agent that refunds before looking
the order up passed every harvested case. On agents written as each framework's docs write them
(offline scripted models), production looks the order up and then refunds it (``issue_refund`` is
mutating in the config); the harvested case's ``order`` says so, the ``reorder`` regression fails with
a detail naming the refund, and a reviewer relaxes the rule in the case file.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester import checks
from harvester.case import AgentCase, CaseFolder, OrderRule, load_case
from harvester.cli import main
from harvester.config import Config
from harvester.errors import CaseFileError
from harvester.harvest import case_from_run, rerecord
from harvester.report import Report
from tests.apps import shop
from tests.builders.cli import one_line_error
from tests.builders.project import capture_production, cli, enter_project
from tests.builders.runs import call, run

APPS = (
    "pydantic_ai_app",
    "langchain_app",
    "openai_agents_app",
    "smolagents_app",
    "langgraph_async_app",
    "raw_openai_app",
    "raw_anthropic_app",
)
# A raw SDK loop replays as docs/own-loop.md writes it (``@harvester.tool`` on what the loop dispatches).
FACTORIES = {"raw_openai_app": "build_documented", "raw_anthropic_app": "build_documented"}
MUTATING = Config(mutating_tools=["issue_refund"])
TOO_EARLY = "issue_refund came too early: executed at step 1, before get_order"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield enter_project(tmp_path, monkeypatch, "refund")


def harvested_refund(app: Any, project: Path) -> Path:
    """Production (look up, then refund) captured, harvested and accepted; returns the case file."""
    assert capture_production(app, project / "traces.db").trajectory() == ["get_order", "issue_refund"]
    assert shop.LIVE == {"get_order": 1, "issue_refund": 1}
    shop.LIVE.clear()
    assert cli("harvest").exit_code == 0
    (case,) = CaseFolder(project / "cases").cases("pending")
    assert cli("accept", case.id).exit_code == 0
    return project / "cases" / f"{case.id}.json"


def replay(variant: str, monkeypatch: pytest.MonkeyPatch, app_name: str) -> tuple[int, Any]:
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", f"tests.apps.{app_name}:{FACTORIES.get(app_name, 'build')}", "--report", "r.json")
    (result,) = Report.load("r.json").results
    return out.exit_code, result


@pytest.mark.parametrize("app_name", APPS)
def test_a_refund_before_the_lookup_fails_the_harvested_case(
    app_name: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = harvested_refund(importlib.import_module(f"tests.apps.{app_name}"), project)
    case = load_case(path)
    assert case.order == [OrderRule(call="issue_refund", after=["get_order"])]
    assert orjson.loads(path.read_bytes())["order"] == [{"call": "issue_refund", "after": ["get_order"]}]

    code, same = replay("refund", monkeypatch, app_name)
    assert code == 0 and same.passed, same.reasons()

    code, early = replay("reorder", monkeypatch, app_name)
    assert code == 1 and not early.passed and early.no_fixture == 0
    failed = {c.name: c.detail for c in early.checks if c.passed is False}
    assert list(failed) == ["call_order(issue_refund after get_order)"]  # every other check passes
    assert failed["call_order(issue_refund after get_order)"].startswith(TOO_EARLY)

    # the reviewer decides the order does not matter here: visible in the case file's diff
    data = orjson.loads(path.read_bytes())
    data["order"][0]["after"] = []
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    code, relaxed = replay("reorder", monkeypatch, app_name)
    assert code == 0 and relaxed.passed, relaxed.reasons()
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


def test_an_order_naming_a_call_the_case_does_not_record_is_one_line_naming_the_file_and_field(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = CaseFolder(project / "cases")
    folder.save(case_from_run(run(call("get_order"), call("issue_refund")), config=MUTATING))
    (case,) = folder.cases("pending")
    path = folder.find(case.id)
    data = orjson.loads(path.read_bytes())
    data["order"] = [{"call": "issue_refund", "after": ["get_order", "lookup_order"]}]
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(CaseFileError) as err:
        load_case(path)
    assert err.value.field == "order.0.after.1" and "'lookup_order' is not a call this case records" in str(err.value)
    one_line_error(cli("cases", "show", case.id), str(path), "order.0.after.1: 'lookup_order'")
    data["order"] = [{"call": "send_email", "after": ["get_order"]}]
    path.write_bytes(orjson.dumps(data))
    one_line_error(cli("cases", "show", case.id), "order.0.call: 'send_email' is not a call")
    data["order"] = [{"call": "issue_refund", "after": "get_order"}]  # not a list
    path.write_bytes(orjson.dumps(data))
    one_line_error(cli("cases", "show", case.id), str(path), "order.0.after")
    data["order"] = [{"call": "issue_refund", "after": ["get_order", "issue_refund"]}]  # could never pass
    path.write_bytes(orjson.dumps(data))
    one_line_error(cli("cases", "show", case.id), str(path), "order.0.after.1: 'issue_refund' cannot come after itself")


def test_review_edits_the_order_and_refuses_a_call_the_case_does_not_record(project: Path) -> None:
    folder = CaseFolder(project / "cases")
    folder.save(case_from_run(run(call("kb_search"), call("get_order"), call("issue_refund")), config=MUTATING))
    (case,) = folder.cases("pending")
    assert [r.summary() for r in case.order] == ["issue_refund after kb_search, get_order"]
    out = CliRunner().invoke(main, ["review", case.id], input="e\norder\nissue_refund after lookup\ns\n")
    assert out.exit_code == 0 and "'lookup' is not a call this case records" in out.output
    assert folder.load(case.id).order == case.order
    out = CliRunner().invoke(main, ["review", case.id], input="e\norder\nissue_refund after get_order\ns\n")
    assert out.exit_code == 0 and "order:             issue_refund after get_order" in out.output
    assert folder.load(case.id).order == [OrderRule(call="issue_refund", after=["get_order"])]
    for no_rule in (" ; ", "- ; -"):  # only "-" drops every rule
        out = CliRunner().invoke(main, ["review", case.id], input=f"e\norder\n{no_rule}\ns\n")
        assert out.exit_code == 0 and "names no rule" in out.output, out.output
        assert folder.load(case.id).order == [OrderRule(call="issue_refund", after=["get_order"])]
    out = CliRunner().invoke(main, ["review", case.id], input="e\norder\nissue_refund after issue_refund\ns\n")
    assert out.exit_code == 0 and "cannot come after itself" in out.output
    assert folder.load(case.id).order == [OrderRule(call="issue_refund", after=["get_order"])]
    out = CliRunner().invoke(main, ["review", case.id], input="e\norder\n-\ns\n")
    assert out.exit_code == 0 and folder.load(case.id).order == []


# -- the check ---------------------------------------------------------------------------------------
def test_call_order_names_the_call_that_came_too_early():
    check = checks.from_spec({"check": "call_order", "call": "issue_refund", "after": ["kb_search", "get_order"]})
    assert check.label() == "call_order(issue_refund after kb_search, get_order)"
    ok, detail = check(run(call("get_order"), call("issue_refund"), call("kb_search")))
    assert not ok and detail.startswith("issue_refund came too early: executed at step 2, before kb_search (")
    assert check(run(call("kb_search"), call("get_order"), call("issue_refund"))) == (
        True,
        "issue_refund at step 3, after kb_search, get_order",
    )
    assert check(run(call("kb_search")))[0] is True  # never refunded: nothing to order
    # a lookup that failed, or a refund that was denied, is not what the order is about
    failed_lookup = run(call("kb_search"), call("get_order", status="error"), call("issue_refund"))
    assert check(failed_lookup)[1].startswith(
        "issue_refund ran, but get_order, which must come before it, never ran successfully ("
    )
    assert check(run(call("issue_refund", status="blocked"), call("kb_search"), call("get_order")))[0] is True


def test_call_order_says_a_call_that_never_ran_never_ran():
    """A skipped call did not come "after": the detail says the call it had to precede ran without it."""
    check = checks.from_spec({"check": "call_order", "call": "send_email", "after": ["get_order", "issue_refund"]})
    ok, detail = check(run(call("send_email"), call("get_order")))
    assert not ok and detail.startswith(
        "send_email came too early: executed at step 1, before get_order; "
        "send_email ran, but issue_refund, which must come before it, never ran successfully ("
    )
    assert "before issue_refund" not in check(run(call("get_order"), call("send_email")))[1]


@pytest.mark.parametrize(
    "spec",
    [
        {"check": "call_order", "after": ["get_order"]},
        {"check": "call_order", "call": "", "after": []},
        {"check": "call_order", "call": "issue_refund", "after": "get_order"},
    ],
)
def test_a_bad_call_order_spec_is_a_check_spec_error(spec):
    from harvester.errors import CheckSpecError

    with pytest.raises(CheckSpecError):
        checks.from_spec(spec)


# -- what harvest writes, and what a refresh keeps -----------------------------------------------------
def test_each_mutating_call_requires_what_ran_before_its_first_execution():
    case = case_from_run(
        run(
            call("kb_search"),
            call("get_order", status="error"),  # a failed attempt is no lookup
            call("get_order"),
            call("issue_refund"),
            call("send_email"),
            call("issue_refund", args={"q": "again"}),
        ),
        config=Config(mutating_tools=["issue_refund", "send_*"]),
    )
    assert [r.summary() for r in case.order] == [
        "issue_refund after kb_search, get_order",
        "send_email after kb_search, get_order, issue_refund",
    ]
    assert [c.label() for c in case.auto_checks() if c.name == "call_order"] == [
        "call_order(issue_refund after kb_search, get_order)",
        "call_order(send_email after kb_search, get_order, issue_refund)",
    ]


def test_a_forbidden_call_is_ordered_but_never_required_before_another():
    """An incident's forbidden refund keeps its order; a forbidden tool is never demanded before another."""
    case = case_from_run(
        run(call("get_order"), call("issue_refund"), call("send_email")),
        config=Config(mutating_tools=["send_email"]),
        forbid=["issue_refund"],
        incident=True,
    )
    assert set(case.forbidden_tools) == {"issue_refund", "send_email"}
    assert [r.summary() for r in case.order] == ["issue_refund after get_order", "send_email after get_order"]


def test_no_rule_without_a_mutating_call_or_without_a_call_before_it():
    assert case_from_run(run(call("kb_search"), call("get_order"))).order == []
    assert case_from_run(run(call("issue_refund"), call("get_order")), config=MUTATING).order == []


def test_a_case_file_without_order_loads_and_checks_no_order(tmp_path: Path):
    case = case_from_run(run(call("get_order"), call("issue_refund")), config=MUTATING)
    data = case.model_dump(mode="json", by_alias=True)
    del data["order"]
    path = tmp_path / f"{case.id}.json"
    path.write_bytes(orjson.dumps(data))
    old = load_case(path)
    assert old.order == [] and not any(c.name == "call_order" for c in old.compiled_checks())


def test_rerecord_keeps_the_reviewers_order_and_proposes_rules_for_new_mutating_calls():
    old = case_from_run(run(call("kb_search"), call("get_order"), call("issue_refund")), config=MUTATING)
    relaxed = old.model_copy(
        update={"status": "accepted", "order": [OrderRule(call="issue_refund", after=["get_order"])]}
    )
    newer = run(call("get_order"), call("issue_refund"), call("send_email"), trace="u" * 32)
    config = Config(mutating_tools=["issue_refund", "send_email"])
    refreshed = rerecord(relaxed, newer, config=config)
    assert [r.summary() for r in refreshed.case.order] == [
        "issue_refund after get_order",  # the reviewer's, kept
        "send_email after get_order, issue_refund",  # the new recording's
    ]
    assert "order: issue_refund after get_order  =>  issue_refund after get_order; send_email after" in "\n".join(
        refreshed.changes
    )
    # a call the new recording no longer makes leaves the reviewer's rule
    without_lookup = run(call("kb_search"), call("issue_refund"), trace="v" * 32)
    assert [r.summary() for r in rerecord(relaxed, without_lookup, config=config).case.order] == [
        "issue_refund after -"
    ]


def test_a_reordered_replay_of_a_case_made_in_code_fails_only_on_order():
    case: AgentCase = case_from_run(run(call("get_order"), call("issue_refund")), config=MUTATING)
    reordered = run(call("issue_refund"), call("get_order"))
    results = {c.label(): c(reordered) for c in case.compiled_checks()}
    assert [label for label, (ok, _) in results.items() if not ok] == ["call_order(issue_refund after get_order)"]
