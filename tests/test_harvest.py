"""case_from_run, failure kinds, signatures and the streaming batch harvest."""

from __future__ import annotations

import pytest

from harvester.canonical import fixture_key
from harvester.case import CaseFolder, load_case, load_cases
from harvester.config import Config
from harvester.harvest import FAILURE_KINDS, case_from_run, failure_kind, harvest, normalize_prompt, signature, slug
from harvester.model import ErrorInfo, LlmCall, Message, ModelRequest, Usage
from tests.builders.runs import call, run

CONFIG = Config(
    mutating_tools=["issue_refund", "delete_*"],
    ignore_args={"kb_search": ["request_id"]},
    prices={"gpt-4.1-mini": {"input": 0.4, "output": 1.6}},
)


class FakeStore:
    """The slice of the TraceStore API harvest uses, with call accounting for the streaming test."""

    def __init__(self, runs):
        self._runs = runs
        self.calls = []

    def runs(self, failed=None, agent=None, since=None, until=None, limit=None):
        self.calls.append(dict(failed=failed, agent=agent, since=since, limit=limit))
        n = 0
        for r in self._runs() if callable(self._runs) else self._runs:
            if failed is not None and r.failed != failed:
                continue
            if agent is not None and r.agent != agent:
                continue
            if limit is not None and n >= limit:
                return
            n += 1
            yield r


# -- case_from_run ------------------------------------------------------------------------------
def test_fixtures_keep_every_executed_call_in_order_with_ignored_args():
    r = run(
        call("kb_search", args={"query": "refunds", "request_id": "x1"}),
        call("get_order", "error", args={"order_id": "A1001"}),
        call("get_order", args={"order_id": "A1001"}),
        call("issue_refund", "blocked", args={"order_id": "A1001"}),
    )
    case = case_from_run(r, config=CONFIG)
    assert [f.tool for f in case.fixtures] == ["kb_search", "get_order", "get_order"]  # blocked: never ran
    assert case.fixtures[0].key == fixture_key("kb_search", {"query": "refunds"})  # request_id ignored
    assert case.fixtures[0].args == {"query": "refunds", "request_id": "x1"}  # args kept in clear
    assert case.fixtures[1].error.type == "timeout" and case.fixtures[1].result is None
    assert case.fixtures[2].result == "get_order result" and case.fixtures[1].key == case.fixtures[2].key
    assert case.ignore_args == {"kb_search": ["request_id"]}
    assert case.status == "pending" and case.source.trace_id == r.trace_id
    assert case.source.captured_at == r.started_at and case.source.agent == "support" and case.source.seen == 1
    assert case.recorded.trajectory == ["kb_search", "get_order"] and case.recorded.steps == 4


def test_min_steps_drops_retries_and_exact_repeats():
    r = run(
        call("kb_search", args={"query": "a"}),
        call("get_order", "error", args={"id": 1}),
        call("get_order", args={"id": 1}),  # retry
        call("kb_search", args={"query": "a"}),  # exact repeat
        call("kb_search", args={"query": "b"}),
    )  # a different search counts
    case = case_from_run(r)
    assert case.min_steps == 3
    assert case.appropriate_tools == ["kb_search", "get_order"]


def test_min_steps_uses_ignore_args_for_repeats():
    r = run(
        call("kb_search", args={"query": "a", "request_id": "1"}),
        call("kb_search", args={"query": "a", "request_id": "2"}),
    )
    assert case_from_run(r, config=CONFIG).min_steps == 1
    assert case_from_run(r).min_steps == 2


def test_forbidden_tools_are_unneeded_mutating_tools_with_globs_expanded():
    r = run(call("kb_search"), call("delete_user", "blocked"), call("delete_order", "blocked"))
    case = case_from_run(r, config=CONFIG)
    assert case.forbidden_tools == ["issue_refund", "delete_user", "delete_order"]
    needed = run(call("issue_refund"), prompt="refund A1")
    assert case_from_run(needed, config=CONFIG).forbidden_tools == []
    assert case_from_run(needed, config=CONFIG).appropriate_tools == ["issue_refund"]


def test_a_denied_request_is_forbidden_even_without_configured_mutating_tools():
    r = run(call("kb_search"), call("issue_refund", "blocked", args={"order_id": "A1001"}))
    case = case_from_run(r)
    assert case.forbidden_tools == ["issue_refund"] and case.recorded.denied == ["issue_refund"]
    assert [f.tool for f in case.fixtures] == ["kb_search"]  # a denied call has no result to freeze
    assert "never_used(issue_refund)" in [c.label() for c in case.compiled_checks()]


def test_incident_forbids_the_mutating_tool_that_ran():
    r = run(call("kb_search"), call("get_order"), call("issue_refund"))
    case = case_from_run(
        r,
        config=CONFIG,
        incident=True,
        why="refunded without approval",
        forbid=["send_email"],
        required_elements=["30 days"],
        expected="Explain the 30-day window",
        tags=["billing"],
    )
    assert case.source.failure_kind == "unintended_action"
    assert case.forbidden_tools == ["issue_refund", "send_email"]
    assert case.appropriate_tools == ["kb_search", "get_order"] and case.min_steps == 2
    assert case.tags == ["regression", "unintended_action", "billing"]
    assert case.why == "refunded without approval" and case.expected == "Explain the 30-day window"
    assert case.required_elements == ["30 days"]
    # the implied checks come from the fields, not duplicated declarations
    labels = [c.label() for c in case.compiled_checks()]
    assert labels.count("never_used(issue_refund, send_email)") == 1 and "answered" in labels
    assert "min_steps(2, kb_search, get_order)" in labels  # a floor as well as the 3x bound
    # the work the task needed, the harmful call left out: the replay must do at least that
    assert case.checks == [
        {"check": "answered"},
        {
            "check": "trajectory_match",
            "reference": [
                {"name": "kb_search", "args": {"q": "kb_search"}},
                {"name": "get_order", "args": {"q": "get_order"}},
            ],
            "mode": "superset",
            "args": "ignore",
        },
    ]


@pytest.mark.parametrize(
    "r, kwargs, kind",
    [
        (run(call("a"), call("issue_refund")), {"incident": True}, "unintended_action"),
        (run(call("a"), call("issue_refund", "blocked"), stop="deferred"), {}, "blocked_action"),
        (run(call("a"), call("a"), call("a")), {}, "loop"),
        (run(call("a"), stop="loop_detected"), {}, "loop"),
        (run(call("a"), stop="budget_exceeded"), {}, "budget_exceeded"),
        (run(call("a"), stop="max_steps"), {}, "max_steps"),
        (run(call("a"), stop="error", error=ErrorInfo(type="KeyError", message="x"), answer=None), {}, "exception"),
        (run(call("a", "error"), call("a")), {}, "tool_error"),
        (run(call("a"), answer="I'm sorry, I don't know."), {"incident": True}, "abstained"),
        (run(call("a"), feedback="negative"), {}, "negative_feedback"),
        (run(call("a")), {"incident": True}, "negative_feedback"),
        (run(call("a")), {}, None),
        (run(call("a"), answer="I don't know."), {}, None),  # an unflagged abstention is behaviour to keep
    ],
)
def test_failure_kinds(r, kwargs, kind):
    assert failure_kind(r, config=CONFIG, **kwargs) == kind
    assert kind is None or kind in FAILURE_KINDS


def test_precedence_damage_before_ending_before_contributors():
    r = run(call("get_order", "error"), call("issue_refund"), call("x"), call("x"), call("x"), stop="max_steps")
    assert failure_kind(r, config=CONFIG, incident=True) == "unintended_action"
    assert failure_kind(r, config=CONFIG) == "loop"
    assert failure_kind(run(call("get_order", "error"), stop="max_steps")) == "max_steps"
    assert failure_kind(run(call("a", "error"), stop="error")) == "exception"


def test_tags_why_and_checks_for_failures_and_typical_runs():
    failed = case_from_run(run(call("get_order", "error"), stop="error", answer=None))
    assert failed.tags == ["regression", "exception"]
    assert failed.why.startswith("exception: ")
    typical = case_from_run(run(call("kb_search"), call("get_order")), tags=["nightly"])
    assert typical.tags == ["typical", "nightly"] and typical.source.failure_kind is None
    assert typical.why == "typical support run (kb_search -> get_order)"
    assert typical.checks[0] == {"check": "answered"} and typical.trajectory()["mode"] == "superset"
    abstaining = case_from_run(run(call("kb_search"), answer="I'm sorry, I can't help with that."))
    assert abstaining.checks[0] == {"check": "abstained"}
    should = case_from_run(run(call("kb_search")), incident=True, expected="I don't know; escalate to a human")
    assert should.checks[0] == {"check": "abstained"}


def test_cost_headroom_and_prices():
    r = run(call("a"), cost=0.0042)
    case = case_from_run(r)
    assert case.recorded.cost == 0.0042 and case.max_cost == 0.0084
    priced = run(call("a"), model="gpt-4.1-mini", usage=Usage(input_tokens=1000, output_tokens=1000))
    assert case_from_run(priced, config=CONFIG).recorded.cost == pytest.approx(2.0)
    assert case_from_run(priced, config=CONFIG).max_cost == pytest.approx(4.0)
    assert case_from_run(priced).max_cost is None  # no prices: no cost gate


def test_truncated_results_and_hidden_payloads_need_review():
    r = run(call("kb_search", truncated=True, result="Refunds are acc"))
    case = case_from_run(r)
    assert case.fixtures[0].truncated
    assert len(case.review_notes) == 1 and "truncated" in case.review_notes[0]
    hidden = run(call("kb_search", args=None, result=None), prompt=None, answer=None, content_captured=False)
    notes = case_from_run(hidden).review_notes
    assert any("fixtures are incomplete" in n for n in notes) and any("prompt" in n for n in notes)
    assert case_from_run(run(call("a"))).review_notes == []


def test_content_capture_off_only_when_no_call_holds_payloads():
    """A run read as partly hidden (a model call's text, say) whose calls all hold their payloads needs no
    note; a call missing only its args is named, not called content capture off."""
    whole = run(call("kb_search"), call("get_order"), content_captured=False)
    assert case_from_run(whole).review_notes == []
    some = run(call("kb_search"), call("get_order", args=None), content_captured=False)
    (note,) = case_from_run(some).review_notes
    assert note.startswith("fixture 1 (get_order:") and "args were not captured" in note
    assert "content capture off" not in note
    hidden = run(call("kb_search", result=None), call("get_order", args=None, result=None), content_captured=False)
    (note,) = case_from_run(hidden).review_notes
    assert "content capture off" in note


def test_slugs():
    assert slug("Can I still return order A1001?") == "return-order-a1001"
    assert slug("Héllo, ¿dónde está mi pedido número 42 por favor?") == "donde-esta-mi-pedido-numero-42"
    long = slug("supercalifragilisticexpialidocious " * 5)
    assert len(long) <= 48 and long == "supercalifragilisticexpialidocious"
    assert slug("the of and") == "the-of-and"  # nothing meaningful: keep what there is
    assert slug(None, fallback="run-abc") == "run-abc" and slug("!!!") == "case"
    assert case_from_run(run(call("a"), prompt=None, trace="abcdef12" * 4)).id == "run-abcdef12"


def test_signature_normalizes_prompt_and_separates_kinds():
    assert normalize_prompt("  Refund  order #A1001, please!") == normalize_prompt("refund order a1002 please")
    a = run(call("get_order"), prompt="Where is order 1001?")
    b = run(call("get_order"), prompt="where is ORDER 2002 ?!")
    assert signature(a) == signature(b)
    assert signature(a) != signature(run(call("get_order"), call("kb_search"), prompt="Where is order 1001?"))
    assert signature(a) != signature(run(call("get_order", "error"), prompt="Where is order 1001?"))


# -- harvest ------------------------------------------------------------------------------------
def test_harvest_dedupes_by_signature_and_counts_seen(tmp_path):
    runs = [run(call("get_order", args={"id": i}), prompt=f"Where is order {i}?", trace=f"{i:032x}") for i in range(5)]
    runs += [run(call("get_order", "error"), stop="error", answer=None, prompt="Where is order 9?", trace="f" * 32)]
    result = harvest(FakeStore(runs), tmp_path, config=CONFIG)
    assert (result.runs, result.new, result.updated, result.skipped, result.cases) == (6, 2, 0, 0, 2)
    cases = {c.id: c for c in load_cases(tmp_path, status="pending")}
    assert sorted(cases) == ["order-0", "order-9"]  # named after the first run of each group
    assert sorted(c.source.seen for c in cases.values()) == [1, 5]
    assert result.summary() == "harvested 6 runs into 2 cases (new 2, updated 0, skipped 0 reviewed)"


def test_reharvest_updates_pending_and_never_touches_reviewed(tmp_path):
    first = [
        run(call("get_order"), prompt="Where is order 1?", trace="a" * 32),
        run(call("kb_search"), prompt="What is the refund policy?", trace="b" * 32),
    ]
    harvest(FakeStore(first), tmp_path)
    folder = CaseFolder(tmp_path)
    accepted = folder.load("refund-policy")
    accepted.status = "accepted"
    accepted.why = "reviewed by a human"
    accepted_path = folder.save(accepted)
    before = accepted_path.read_bytes()
    again = harvest(FakeStore(first), tmp_path)  # the same runs again: nothing is counted twice
    assert (again.new, again.updated, again.skipped, again.counted) == (0, 0, 1, 1)
    assert again.summary().endswith("(new 0, updated 0, skipped 1 reviewed, 1 already counted)")
    assert accepted_path.read_bytes() == before
    assert folder.load("order-1").source.seen == 1
    later = run(call("get_order"), prompt="where is order 2", trace="c" * 32).model_copy(
        update={"started_at": "2026-11-30T05:00:00Z"}
    )
    third = harvest(FakeStore(first + [later]), tmp_path)
    assert (third.new, third.updated, third.skipped) == (0, 1, 1)
    order = folder.load("order-1")
    assert order.source.seen == 2 and order.source.last_seen == "2026-11-30T05:00:00Z"
    assert not (tmp_path / "pending" / "refund-policy.json").exists()


def test_harvest_filters_and_sample(tmp_path):
    ok = [run(call("a"), prompt=f"question {w}", trace=f"{i:032x}") for i, w in enumerate("abcdefgh")]
    bad = [run(call("a", "error"), prompt="broken", trace="e" * 32)]
    store = FakeStore(ok + bad)
    result = harvest(store, tmp_path / "s", sample=3)
    assert result.runs == 9 and result.new == 4  # the failure plus 3 sampled typical runs
    again = harvest(FakeStore(ok + bad), tmp_path / "t", sample=3)
    assert sorted(again.new_ids) == sorted(result.new_ids)  # reproducible
    only = FakeStore(ok + bad)
    assert harvest(only, tmp_path / "u", failed_only=True, agent="support", limit=10, since="2026-01-01").new == 1
    assert only.calls == [dict(failed=True, agent="support", since="2026-01-01", limit=10)]


def test_harvest_streams(tmp_path):
    """Runs come from a generator and 300 of them become one case seen 300 times."""

    def gen():
        for i in range(300):
            yield run(call("a", args={"i": i}), prompt=f"question number {i}", trace=f"{i:032x}")

    seen = []
    result = harvest(FakeStore(gen), tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert (
        result.runs == 300
        and result.new == 1
        and load_case(tmp_path / "pending" / "question-number-0.json").source.seen == 300
    )
    assert seen == [(100, None), (200, None), (300, None), (300, None)]


def test_another_run_of_a_trace_that_is_already_a_case_gets_its_own_case(tmp_path):
    """A trace holds several runs (a chat session, runs in one request): only the case's own run is known."""
    first = run(call("get_order"), prompt="Where is order 1?", trace="a" * 32)
    assert harvest(FakeStore([first]), tmp_path).new == 1
    second = run(call("kb_search", "error"), prompt="What is the refund policy?", trace="a" * 32).model_copy(
        update={"run_id": "r2"}
    )
    again = harvest(FakeStore([first, second]), tmp_path)
    assert (again.new, again.counted) == (1, 1)
    assert CaseFolder(tmp_path).load(again.new_ids[0]).source.run_id == "r2"


def test_a_denied_call_whose_result_the_model_was_given_stops_accept_with_a_note():
    """No tool span ran ``get_order`` in this trace (a thread pool lost the context), but the next model
    call was given its result: the case would forbid a tool the agent needs, so the reviewer decides."""
    asked = LlmCall(requests=[{"name": "get_order", "call_id": "c1", "args": {"order_id": "A1001"}}])
    given = ModelRequest(
        messages=[
            Message(role="user", content="Where is A1001?"),
            Message(role="assistant", tool_calls=[{"name": "get_order", "call_id": "c1", "args": {}}]),
            Message(role="tool", content='{"status": "shipped"}', tool_call_id="c1"),
        ]
    )
    denied = call("get_order", "blocked", call_id="c1", result=None)
    case = case_from_run(run(denied, llm_calls=[asked, LlmCall(request=given)]), config=CONFIG)
    assert "get_order" in case.forbidden_tools
    (note,) = [n for n in case.review_notes if "a later model call was given a result" in n]
    assert note.startswith("get_order: requested") and not note.startswith("note: ")
    refused = case_from_run(run(denied, llm_calls=[asked, LlmCall()]), config=CONFIG)  # never answered: denied
    assert not any("a later model call" in n for n in refused.review_notes)
    # a guardrail that denies one call among executed ones tells the model so too: that is a denial
    guarded = case_from_run(run(call("kb_search"), denied, llm_calls=[asked, LlmCall(request=given)]), config=CONFIG)
    assert not any("a later model call" in n for n in guarded.review_notes)
