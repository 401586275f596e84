"""Recorded calls a replay never made: listed on the case result and in the summary's "differs" lines,
and with ``strict_consumption`` a failed ``recordings_consumed`` check (recovery variants exempt)."""

from __future__ import annotations

import json

from harvester.case import load_cases
from harvester.fixtures import FixtureTools
from harvester.replay import replay
from harvester.report import Report
from tests.builders.agents import GOOD, case, fx, scripted

KB_ARGS, ORDER_ARGS = {"query": "refund policy"}, {"order_id": "A1001"}
KB = fx("kb_search", KB_ARGS, "Refunds within 30 days.")
ORDER = fx("get_order", ORDER_ARGS, {"days_since_delivery": 12})
BOTH = scripted(("kb_search", KB_ARGS), ("get_order", ORDER_ARGS))


def two_calls(**kw):
    """A case whose recording made kb_search then get_order."""
    kw.setdefault("fixtures", [KB, ORDER])
    kw.setdefault("recorded", {"trajectory": ["kb_search", "get_order"], "stop": "answered"})
    return case(**kw)


def checks_of(result):
    return {c.name: (c.passed, c.detail) for c in result.checks}


def test_a_replay_that_makes_fewer_calls_lists_the_ones_it_never_made():
    report = replay([two_calls()], lambda: GOOD)
    (r,) = report.results
    assert r.passed, r.reasons()  # not strict: listed, not failed
    assert r.unused == 1 and r.unused_calls == ['get_order({"order_id":"A1001"})']
    assert "recordings_consumed" not in checks_of(r)
    assert r.differences().endswith('1 recorded call never made (get_order({"order_id":"A1001"}))')
    lines = report.summary().splitlines()
    assert "differs from the recording (passing or failing):" in lines
    (line,) = [x for x in lines if x.startswith("  ~ c1: ")]
    assert '1 recorded call never made (get_order({"order_id":"A1001"}))' in line


def test_unused_calls_survive_the_json_report():
    report = replay([two_calls()], lambda: GOOD)
    again = Report.model_validate(json.loads(report.model_dump_json()))
    assert again.results[0].unused == 1 and again.results[0].unused_calls == report.results[0].unused_calls


def test_strict_consumption_fails_the_case_and_names_the_calls():
    report = replay([two_calls(strict_consumption=True)], lambda: GOOD)
    (r,) = report.results
    assert not r.passed
    assert checks_of(r)["recordings_consumed"] == (False, '1 recorded call never made: get_order({"order_id":"A1001"})')
    assert 'recordings_consumed: 1 recorded call never made: get_order({"order_id":"A1001"})' in r.reasons()
    assert '  - recordings_consumed: 1 recorded call never made: get_order({"order_id":"A1001"})' in (
        report.summary().splitlines()
    )


def test_strict_consumption_from_a_case_file(tmp_path):
    data = two_calls().model_dump(mode="json", by_alias=True)
    data["strict_consumption"] = True
    (tmp_path / "c1.json").write_text(json.dumps(data))
    (loaded,) = load_cases(tmp_path, status="accepted")
    assert loaded.strict_consumption is True
    (r,) = replay([loaded], lambda: GOOD).results
    assert not r.passed and checks_of(r)["recordings_consumed"][0] is False


def test_a_case_that_consumes_every_recording_passes_with_strict_consumption():
    (r,) = replay([two_calls(strict_consumption=True)], lambda: BOTH).results
    assert r.passed, r.reasons()
    assert r.unused == 0 and r.unused_calls == [] and r.differences() is None
    assert checks_of(r)["recordings_consumed"] == (True, "every recorded call was made")


def test_each_recording_of_a_repeated_call_is_one_call():
    twice = case(fixtures=[KB, KB], recorded={"trajectory": ["kb_search", "kb_search"], "stop": "answered"})
    (once,) = replay([twice.model_copy(update={"strict_consumption": True})], lambda: GOOD).results
    assert once.unused == 1 and once.unused_calls == ['kb_search({"query":"refund policy"})'] and not once.passed
    again = scripted(("kb_search", KB_ARGS), ("kb_search", KB_ARGS))
    (both,) = replay([twice.model_copy(update={"strict_consumption": True})], lambda: again).results
    assert both.unused == 0 and both.passed, both.reasons()


def test_a_call_the_recording_cannot_answer_consumes_nothing():
    other = scripted(("kb_search", {"query": "returns"}))
    (r,) = replay([case(strict_consumption=True)], lambda: other).results
    assert r.no_fixture == 1 and r.unused == 1 and r.unused_calls == ['kb_search({"query":"refund policy"})']
    assert checks_of(r)["recordings_consumed"][0] is False


def test_a_call_matched_through_ignore_args_consumes_its_recording():
    recorded = fx("kb_search", {"query": "refund policy", "request_id": "x1"}, "Refunds within 30 days.")
    c = case(fixtures=[recorded], ignore_args={"kb_search": ["request_id"]}, strict_consumption=True)
    agent = scripted(("kb_search", {"query": "refund policy", "request_id": "x9"}))
    (r,) = replay([c], lambda: agent).results
    assert r.passed and r.unused == 0, r.reasons()


def test_many_unused_calls_are_counted_and_the_first_few_shown():
    orders = [fx("get_order", {"order_id": f"A{i}"}, {"days_since_delivery": i}) for i in range(7)]
    c = two_calls(fixtures=[KB, *orders], strict_consumption=True)
    (r,) = replay([c], lambda: GOOD).results
    assert r.unused == 7 and r.unused_calls == [f'get_order({{"order_id":"A{i}"}})' for i in range(5)]
    detail = checks_of(r)["recordings_consumed"][1]
    assert detail.startswith('7 recorded calls never made: get_order({"order_id":"A0"}); ')
    assert detail.endswith('get_order({"order_id":"A4"}); and 2 more')
    assert '7 recorded calls never made (get_order({"order_id":"A0"}), ' in r.differences()
    assert r.differences().endswith('get_order({"order_id":"A2"}), ...)')


def test_long_args_are_shortened_in_the_listing():
    big = fx("get_order", {"order_id": "A1001", "note": "x" * 200}, {})
    (r,) = replay([two_calls(fixtures=[KB, big])], lambda: GOOD).results
    (text,) = r.unused_calls
    assert text.startswith('get_order({"note":"xxx') and text.endswith("...)") and len(text) == len("get_order()") + 80


def test_injected_failure_variants_are_exempt():
    report = replay([two_calls(strict_consumption=True)], lambda: BOTH, inject=True)
    base, *variants = report.results
    assert base.passed and base.variant_of is None
    assert variants and all(v.variant_of == "c1" for v in variants)
    assert any(v.unused for v in variants)  # the broken kb_search left its recording unused
    for v in variants:
        assert v.passed, (v.id, v.reasons())
        assert "recordings_consumed" not in checks_of(v)
    assert not [text for r, text in report.differing() if r.variant_of is not None and "never made" in text]


def test_a_case_that_injects_a_failure_itself_is_exempt():
    c = two_calls(strict_consumption=True, inject_failures={"get_order": {"mode": "timeout"}})
    (r,) = replay([c], lambda: BOTH).results
    assert r.unused == 1 and "recordings_consumed" not in checks_of(r)


def test_a_forbidden_call_left_unmade_is_what_an_incident_case_wants():
    """An incident's recording holds the refund the agent should not have issued: a fixed agent never
    makes it, and strict_consumption must not demand it back."""
    refund = fx("issue_refund", ORDER_ARGS, {"ok": True})
    incident = case(
        fixtures=[KB, refund],
        recorded={"trajectory": ["kb_search", "issue_refund"], "stop": "answered"},
        forbidden_tools=["issue_refund"],
        strict_consumption=True,
    )
    (r,) = replay([incident], lambda: GOOD).results
    assert r.passed, r.reasons()
    assert r.unused == 1  # still listed: the replay did leave its recording
    assert checks_of(r)["recordings_consumed"] == (
        True,
        "every recorded call was made, except 1 call of a forbidden tool (issue_refund)",
    )


def test_fixture_tools_unused_in_recorded_order():
    c = case(fixtures=[KB, ORDER, fx("kb_search", {"query": "returns"}, "r"), KB])
    tools = FixtureTools(c)
    assert [(f.tool, f.args) for f in tools.unused()] == [(f["tool"], f["args"]) for f in c.model_dump()["fixtures"]]
    tools.execute("kb_search", KB_ARGS)
    tools.execute("get_order", ORDER_ARGS)
    assert [(f.tool, f.args) for f in tools.unused()] == [("kb_search", {"query": "returns"}), ("kb_search", KB_ARGS)]
    tools.execute("kb_search", KB_ARGS)
    tools.execute("kb_search", KB_ARGS)  # a repeat beyond the recording: served again, nothing more to use
    assert [(f.tool, f.args) for f in tools.unused()] == [("kb_search", {"query": "returns"})]
