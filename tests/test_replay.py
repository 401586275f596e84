"""The runner: fresh agents, routing, span observation, failures that stay in their case, trials, inject, shards."""

from __future__ import annotations

import asyncio
import sys
import threading
import types

import pytest

import harvester
from harvester import checks
from harvester.case import Case
from harvester.errors import AgentLoadError
from harvester.fixtures import MODES
from harvester.instrument import agent_run
from harvester.model import Run
from harvester.replay import Suite, divergence, in_shard, load_agent, replay
from tests.builders.agents import GOOD, case, fx, kb_search, scripted


# -- foundation semantics ------------------------------------------------------------------
def test_each_case_gets_a_fresh_agent():
    def build():
        replies = ["the one reply"]
        return lambda prompt: replies.pop()  # a shared agent would be exhausted by the second case

    cases = [Case(id=f"c{i}", task="hi", checks=[checks.answered()], why="w") for i in range(3)]
    report = Suite(cases, name="fresh").run(build)
    assert report.passed == 3 and report.suite == "fresh"


def test_a_case_without_why_warns():
    with pytest.warns(UserWarning, match="case 'c' has no 'why'"):
        Case(id="c", task="hi", checks=[checks.answered()])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Case(id="c", task="hi", why="the refund policy answer")


def test_a_broken_check_fails_its_case_only():
    def broken(run):
        raise ZeroDivisionError("boom")

    cases = [
        Case(id="bad", task="x", checks=[broken], why="w"),
        Case(id="ok", task="x", checks=[checks.answered()], why="w"),
    ]
    report = replay(cases, lambda: lambda p: "fine")
    bad, ok = report.results
    assert not bad.passed and bad.checks[0].detail == "check raised ZeroDivisionError: boom"
    assert ok.passed


def test_an_agent_that_raises_fails_its_case_only():
    def build():
        def agent(prompt):
            if prompt == "crash":
                raise RuntimeError("model exploded")
            return "fine"

        return agent

    cases = [
        Case(id="a", task="crash", checks=[checks.answered()], why="w"),
        Case(id="b", task="ok", checks=[checks.answered()], why="w"),
    ]
    a, b = replay(cases, build).results
    assert not a.passed and a.error == "RuntimeError: model exploded" and a.stop == "error"
    assert b.passed


def test_a_factory_that_raises_fails_the_case():
    # (Changed: a factory failing for EVERY case is now an AgentBuildError; for some cases it fails those.)
    calls = []

    def build():
        calls.append(1)
        if len(calls) == 1:
            raise ImportError("no API key")
        return GOOD

    r, ok = replay([case(), case("c2")], build, concurrency=1).results
    assert not r.passed and r.error == "ImportError: no API key" and ok.passed


def test_garbage_return_fails_the_case_with_a_clear_error():
    (r,) = replay([case()], lambda: lambda p: {"not": "an answer"}).results
    assert not r.passed
    assert r.error.startswith("TypeError: agent returned dict, expected the answer (str) or a Run")


def test_a_factory_that_builds_something_unrunnable():
    built = iter([42, GOOD])
    r, ok = replay([case(), case("c2")], lambda: next(built), concurrency=1).results
    assert "neither callable, nor has .run(prompt)" in r.error and ok.passed


@pytest.mark.slow
def test_hung_sync_agent_is_abandoned_and_fails_its_case():
    release = threading.Event()

    def build():
        def agent(prompt):
            if prompt == "hang":
                release.wait(30)
            return "done"

        return agent

    cases = [Case(id="hang", task="hang", checks=[], why="w"), Case(id="ok", task="ok", checks=[], why="w")]
    try:
        hang, ok = replay(cases, build, timeout=0.05, concurrency=2).results
    finally:
        release.set()
    assert not hang.passed and hang.error.startswith("ReplayTimeout: agent did not finish within 0.05s")
    assert ok.passed


def test_hung_async_agent_is_cancelled():
    def build():
        async def agent(prompt):
            await asyncio.sleep(30)

        return agent

    (r,) = replay([Case(id="a", task="x", checks=[], why="w")], build, timeout=0.05).results
    assert not r.passed and r.error == "ReplayTimeout: agent did not finish within 0.05s"


def test_agent_with_run_method_sync_or_async():
    class Sync:
        def run(self, prompt):
            return "sync answer"

    class Async:
        async def run(self, prompt):
            await asyncio.sleep(0)
            return "async answer"

    c = [Case(id="a", task="x", checks=[checks.answered()], why="w")]
    assert replay(c, Sync).results[0].answer == "sync answer"
    assert replay(c, Async).results[0].answer == "async answer"


def test_agent_may_return_a_run():
    run = Run(trace_id="t", answer="Refunds within 30 days.", stop="answered")
    (r,) = replay([case(min_steps=None)], lambda: lambda p: run).results  # no floor: it calls no tool
    assert r.passed and r.answer == "Refunds within 30 days."


# -- routing and observation ------------------------------------------------------------------
def test_tools_parameter_receives_the_executor():
    def build(tools):
        def agent(prompt):
            return f"Answer: {tools.execute('kb_search', {'query': 'refund policy'})}"

        return agent

    (r,) = replay([case()], build).results
    assert r.passed, r.reasons()
    assert r.answer == "Answer: Refunds within 30 days." and r.trajectory == ["kb_search"]
    assert r.tool_calls == 1 and r.no_fixture == 0


def test_spans_are_read_with_the_production_conventions():
    (r,) = replay([case()], lambda: GOOD, prices={"m1": {"input": 1.0, "output": 2.0}}).results
    assert r.passed, r.reasons()
    assert r.trajectory == ["kb_search"] and r.requested == ["kb_search"] and r.steps == 1
    assert r.cost == pytest.approx(2 * (0.1 + 0.02))
    assert r.divergence is None


def test_forbidden_call_counts_as_unauthorised_and_divergence_is_reported():
    bad = scripted(("kb_search", {"query": "refund policy"}), ("issue_refund", {"order_id": "A1001"}))
    (r,) = replay([case()], lambda: bad).results
    assert not r.passed and r.unauthorised == 1
    assert r.failed_checks()[0].name == "never_used(issue_refund)"
    assert r.divergence.step == 2 and r.divergence.recorded is None and r.divergence.actual == "issue_refund"
    assert r.no_fixture == 1  # issue_refund was never recorded


def test_divergence_is_reported_even_when_checks_pass():
    c = case(recorded={"trajectory": ["kb_search", "kb_search"]})
    (r,) = replay([c], lambda: GOOD).results
    assert r.passed and r.divergence.summary() == "diverged at step 2: recorded kb_search, actual (end)"


def test_a_call_the_recording_cannot_answer_fails_the_case_and_says_which():
    """Like vcrpy refusing an unrecorded request: what the agent did after a no_fixture result was tested
    against nothing real, so weak checks (answered) must not let the case pass."""
    calm = scripted(
        ("kb_search", {"query": "refund policy", "request_id": "r-2"}),
        ("kb_search", {"query": "refund policy"}),
        answer="Refunds within 30 days.",
    )
    c = case(
        fixtures=[fx("kb_search", {"query": "refund policy", "request_id": "r-1"}, "Refunds within 30 days.")],
        recorded={"trajectory": ["kb_search", "kb_search"]},
    )
    report = replay([c, case("same")], lambda: calm)
    r = report.result("c1")
    assert not r.passed and r.no_fixture == 2 and r.divergence is None
    recorded = {"query": "refund policy", "request_id": "r-1"}
    assert [call.model_dump() for call in r.no_fixture_calls] == [
        {
            "tool": "kb_search",
            "reason": "no_match",
            "differs": ["request_id"],
            "args": {"query": "refund policy", "request_id": "r-2"},
            "closest": recorded,
        },
        {
            "tool": "kb_search",
            "reason": "no_match",
            "differs": ["request_id"],
            "args": {"query": "refund policy"},
            "closest": recorded,
        },
    ]
    assert r.reasons() == [
        'recorded_calls_only: 2 calls the recording cannot answer: kb_search({"query":"refund policy",'
        '"request_id":"r-2"}): no_match, differs at request_id; recorded: kb_search({"query":"refund policy",'
        '"request_id":"r-1"}); kb_search({"query":"refund policy"}): no_match, differs at request_id; recorded: '
        'kb_search({"query":"refund policy","request_id":"r-1"})'
    ]
    line = (
        "  ~ c1: 2 no_fixture calls (kb_search: no_match, differs at request_id; kb_search: no_match, "
        'differs at request_id); 1 recorded call never made (kb_search({"query":"refund policy","request_id":"r-1"}))'
    )
    assert line in report.summary().splitlines()
    assert (
        "- ~ **c1** (failed): 2 no_fixture calls (kb_search: no_match, differs at request_id;" in report.to_markdown()
    )
    diverged = case("d1", recorded={"trajectory": ["kb_search", "kb_search"]})
    report = replay([diverged], lambda: GOOD)
    assert report.results[0].passed  # a shorter path, every call answered: shown, not failed
    assert "  ~ d1: diverged at step 2: recorded kb_search, actual (end)" in report.summary().splitlines()
    assert "### Differs from the recording" in report.to_markdown()


def test_a_case_that_injects_failures_may_leave_its_recording():
    other = scripted(("kb_search", {"query": "refund policy"}), ("get_order", {"order_id": "B2"}), answer="ok")
    c = case(inject_failures={"kb_search": {"mode": "timeout"}})
    (r,) = replay([c], lambda: other).results
    assert r.no_fixture == 1 and not any(x.name == "recorded_calls_only" for x in r.checks)


def test_a_failing_case_shows_its_no_fixture_calls():
    other = scripted(("kb_search", {"query": "shipping"}), ("get_order", {"order_id": "A1"}))
    report = replay([case()], lambda: other)
    assert (
        "  ~ c1: 2 no_fixture calls (kb_search: nothing_similar; get_order: unknown_tool); "
        "diverged at step 2: recorded (end), actual get_order; "
        '1 recorded call never made (kb_search({"query":"refund policy"}))' in report.summary().splitlines()
    )


def test_divergence_helper():
    assert divergence(["a", "b"], ["a", "b"]) is None
    assert divergence(["a", "b"], ["a", "c"]).model_dump() == {"step": 2, "recorded": "b", "actual": "c"}
    assert divergence([], ["x"]).step == 1


def test_no_fixture_reaches_the_model_as_a_result():
    other = scripted(("kb_search", {"query": "shipping"}))
    (r,) = replay([case()], lambda: other).results
    assert r.no_fixture == 1 and "no_fixture" in r.answer and not r.passed


def test_concurrent_cases_never_see_each_others_fixtures():
    cases = [
        case(
            f"c{i}",
            required_elements=[f"answer-{i}"],
            fixtures=[fx("kb_search", {"query": "refund policy"}, f"answer-{i}")],
        )
        for i in range(24)
    ]
    report = replay(cases, lambda: GOOD, concurrency=8)
    assert report.passed == 24, report.summary()
    assert [r.answer for r in report.results] == [f"answer-{i}" for i in range(24)]


def test_concurrent_async_agents_never_see_each_others_fixtures():
    @harvester.tool(name="kb_search", spans=False)
    async def akb(query: str) -> str:
        raise AssertionError("live")

    def build():
        async def agent(prompt):
            await asyncio.sleep(0.001)
            return await akb("refund policy")

        return agent

    cases = [
        case(
            f"c{i}",
            required_elements=[f"answer-{i}"],
            fixtures=[fx("kb_search", {"query": "refund policy"}, f"answer-{i}")],
        )
        for i in range(16)
    ]
    report = replay(cases, build, concurrency=16)
    assert [r.answer for r in report.results] == [f"answer-{i}" for i in range(16)]


# -- judge ------------------------------------------------------------------------------------
def test_judge_runs_last_and_only_when_cheap_checks_passed():
    seen = []

    def judge(c, run):
        seen.append(c.id)
        return "30 days" in run.answer, "judge liked it"

    good, bad = case("good"), case("bad", required_elements=["never there"])
    report = replay([good, bad], lambda: GOOD, judge=judge)
    assert seen == ["good"]
    assert report.results[0].checks[-1].name == "judge" and report.results[0].passed
    assert all(c.name != "judge" for c in report.results[1].checks)


def test_a_judge_that_raises_fails_the_case():
    def judge(c, run):
        raise ValueError("no model")

    (r,) = replay([case()], lambda: GOOD, judge=judge).results
    assert not r.passed and r.checks[-1].detail == "check raised ValueError: no model"


# -- trials -------------------------------------------------------------------------------------
def test_trials_give_pass_rate_and_flaky_flag():
    lock, counter = threading.Lock(), [0]

    def build():
        def agent(prompt):
            with lock:
                counter[0] += 1
                n = counter[0]
            return "Refunds within 30 days." if n % 2 else "no idea"

        return agent

    report = replay([case(min_steps=None)], build, trials=4, concurrency=1)  # it answers with no tool
    (r,) = report.results
    assert (r.trials, r.passes, r.passed, r.flaky) == (4, 2, False, True)
    assert report.trials == 4 and "flaky ['c1']" in report.summary()
    assert report.metrics()["task_completion"] == 0.5


# -- failure injection --------------------------------------------------------------------
def test_inject_adds_one_recovery_variant_per_mode():
    report = replay([case()], lambda: GOOD, inject=True)
    ids = [r.id for r in report.results]
    assert ids == ["c1"] + [f"c1@{m}" for m in MODES]
    for r in report.results[1:]:
        assert r.variant_of == "c1" and r.injected.tool == "kb_search"
        assert "recovery" in r.tags and f"recovery/{r.injected.mode}" in r.tags
        assert r.passed, (r.id, r.reasons())  # the agent says sorry instead of crashing
    timeout = report.result("c1@timeout")
    assert timeout.answer.startswith("I'm sorry") and timeout.checks[-1].detail == "abstained"
    rec = report.recovery()
    assert rec["by_mode"] == {m: 1.0 for m in sorted(MODES)} and rec["by_tool"] == {"kb_search": 1.0}
    assert report.metrics()["recovery_rate"] == 1.0
    assert report.metrics()["task_completion"] == 1.0  # variants do not count as tasks


def test_a_variant_keeps_the_cases_forbidden_tools_and_step_bound_only():
    """The answer may be unavailable with a tool broken on purpose: a variant drops the answer checks
    (and the floor on steps), and keeps what the agent must never do and the bound, 3x ``min_steps``."""
    report = replay([case(min_steps=2)], lambda: GOOD, inject=True)
    base, variant = report.result("c1"), report.result("c1@timeout")
    assert "max_steps(6)" in [c.name for c in base.checks]
    assert [c.name for c in variant.checks] == ["never_used(issue_refund)", "max_steps(6)", "recovered"]


def test_variant_fails_when_the_agent_crashes_on_the_failure():
    def build():
        def agent(prompt):
            with agent_run("support", prompt) as run:
                text = kb_search("refund policy")  # ToolFailure propagates: the run errors
                run.finish(text)
            return text

        return agent

    report = replay([case()], build, inject=True)
    timeout = report.result("c1@timeout")
    assert not timeout.passed and timeout.stop == "error"
    assert report.recovery()["by_mode"]["timeout"] == 0.0
    assert report.recovery()["by_mode"]["malformed"] == 1.0


def test_variants_carry_only_recovery_tags_and_the_headline_counts_cases():
    def build():
        def agent(prompt):
            with agent_run("support", prompt) as run:
                text = kb_search("refund policy")  # crashes on every injected error mode
                run.finish(text)
            return text

        return agent

    report = replay([case(tags=["security"])], build, inject=True)
    base, variants = report.results[0], report.results[1:]
    assert base.passed and base.tags == ["security"]
    assert all(v.tags == ["recovery", f"recovery/{v.injected.mode}"] for v in variants)
    assert not all(v.passed for v in variants)
    assert report.by_tag()["security"] == 1.0  # the gate tag:security>=1.0 passes on a healthy agent
    assert report.metrics(tag="security")["task_completion"] == 1.0
    assert 0 < report.by_tag()["recovery"] < 1 and report.by_tag()["recovery/timeout"] == 0.0
    summary = report.summary()
    assert summary.splitlines()[0] == "1/1 passed  (100%)" and "by tag: security=100%" in summary
    assert summary.count("recovery ") == 1  # the variants' own line, not in "by tag"
    md = report.to_markdown()
    assert "**1/1 passed  (100%)**" in md and "failure-injection variants passed)" in md
    assert "| tag:security | 100% |" in md
    assert report.to_junit().count(b"<testcase ") == 1 + len(MODES)  # JUnit lists every variant


# -- shards, progress ---------------------------------------------------------------------
def test_shards_split_stably_and_completely():
    ids = [f"case-{i}" for i in range(60)]
    parts = [[i for i in ids if in_shard(i, (k, 3))] for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(ids) and all(parts)
    cases = [case(i) for i in ids[:9]]
    got = replay(cases, lambda: GOOD, shard=(2, 3))
    assert [r.id for r in got.results] == [i for i in ids[:9] if in_shard(i, (2, 3))] and got.shard == "2/3"
    with pytest.raises(ValueError):
        replay(cases, lambda: GOOD, shard=(4, 3))


def test_progress_is_a_callback_and_the_library_draws_nothing(capsys):
    seen: list[tuple[int, int]] = []
    replay([case(), case("two")], lambda: GOOD, trials=2, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)] and capsys.readouterr().err == ""


# -- loading agents -----------------------------------------------------------------------
def test_load_agent(monkeypatch):
    mod = types.ModuleType("fake_agent_mod")
    mod.build = lambda: GOOD
    mod.not_callable = 3
    monkeypatch.setitem(sys.modules, "fake_agent_mod", mod)
    assert load_agent("fake_agent_mod:build") is mod.build
    with pytest.raises(AgentLoadError, match="cannot import no_such_module_xyz"):
        load_agent("no_such_module_xyz:build")
    with pytest.raises(AgentLoadError, match="has no attribute 'missing'"):
        load_agent("fake_agent_mod:missing")
    with pytest.raises(AgentLoadError, match="not a callable"):
        load_agent("fake_agent_mod:not_callable")
    with pytest.raises(AgentLoadError, match="expected module:attr"):
        load_agent("fake_agent_mod")


def test_a_factory_that_fails_for_every_case_is_a_harness_error():
    from harvester.errors import AgentBuildError

    def build():
        raise RuntimeError("no API key")

    with pytest.raises(AgentBuildError, match="the agent factory .*build failed: RuntimeError: no API key"):
        replay([case("a"), case("b")], build)
    with pytest.raises(AgentBuildError, match="neither callable, nor has .run"):
        replay([case("a")], lambda: 42)

    calls = []

    def sometimes():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("flaky factory")
        return GOOD

    report = replay([case("a"), case("b")], sometimes, concurrency=1)  # one build failed: a case failure
    assert sorted(r.passed for r in report.results) == [False, True]
