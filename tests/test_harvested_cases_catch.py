"""Harvested cases, on real frameworks, catch what the first version let through.

Each test records a production run of a real pydantic-ai or LangChain agent (offline scripted models),
harvests it the way ``harvester harvest`` does, and replays the case: green on the agent that made
it, red on the regression named in the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from harvester.case import AgentCase
from harvester.conventions import runs_from_spans
from harvester.harvest import case_from_run
from harvester.replay import replay as run_replay
from tests.frameworks import langchain_agent, pydantic_ai_agent, tools
from tests.frameworks.langchain_agent import ScriptedChatModel


def replay(cases, build):
    """A replay that also proves no tool body ran for real (the production tools count their runs)."""
    before = dict(tools.RAN)
    report = run_replay(cases, build)
    assert dict(tools.RAN) == before, "a tool body ran during the replay"
    assert report.metrics()["live_tool_calls"] == 0
    return report


MADE_UP = "Order A1001 was delivered last week, you can return it."  # no tool asked


def harvested(spans: list[Any], index: int = 0) -> AgentCase:
    """The case ``harvester harvest`` makes of the ``index``-th run, accepted as it is."""
    run = runs_from_spans(spans)[index]
    case = case_from_run(run)
    return case.model_copy(update={"status": "accepted"})


def _answers_at_once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(MADE_UP)])


def pydantic_ai_build(scenario: str):
    """The agent as production builds it, left for replay to instrument."""
    return lambda: pydantic_ai_agent.build_agent(scenario, None)  # type: ignore[arg-type]


def lazy_pydantic_ai() -> Agent:
    """The regression: same tools, but the model now answers without calling any."""
    agent = Agent(FunctionModel(_answers_at_once, model_name="lazy"), name=pydantic_ai_agent.AGENT_NAME)
    agent.tool_plain(tools.kb_search)
    agent.tool_plain(pydantic_ai_agent.get_order)
    return agent


class _AnswersAtOnce(ScriptedChatModel):
    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=MADE_UP))])


def lazy_langchain() -> Any:
    return create_agent(
        _AnswersAtOnce(scenario="happy"),
        tools=[tools.kb_search, tools.get_order],
        name=pydantic_ai_agent.AGENT_NAME,
    )


def _skipped_work(result) -> None:
    assert not result.passed
    by_name = {c.name.split("(")[0]: c for c in result.checks}
    assert by_name["min_steps"].passed is False
    assert "skipped kb_search, get_order" in by_name["min_steps"].detail
    assert by_name["trajectory_match"].passed is False
    assert "missing kb_search" in by_name["trajectory_match"].detail


# -- skipped work ---------------------------------------------------------------------------------
def test_pydantic_ai_agent_that_stops_calling_its_tools_fails_its_harvested_case():
    case = harvested(pydantic_ai_agent.run_scenario("happy"))
    assert case.trajectory() == {
        "check": "trajectory_match",
        "reference": [
            {"name": "kb_search", "args": {"query": "refund policy"}},
            {"name": "get_order", "args": {"order_id": "A1001"}},
        ],
        "mode": "superset",
        "args": "ignore",
    }
    (same,) = replay([case], pydantic_ai_build("happy")).results
    assert same.passed, same.reasons()
    (lazy,) = replay([case], lazy_pydantic_ai).results
    _skipped_work(lazy)


@pytest.mark.parametrize("instrumentor", langchain_agent.INSTRUMENTORS)
def test_langchain_agent_that_stops_calling_its_tools_fails_its_harvested_case(instrumentor: str):
    case = harvested(langchain_agent.run_scenario("happy", instrumentor=instrumentor))
    assert [c["name"] for c in case.trajectory()["reference"]] == ["kb_search", "get_order"]
    (same,) = replay([case], lambda: langchain_agent.build_agent("happy")).results
    assert same.passed, same.reasons()
    (lazy,) = replay([case], lazy_langchain).results
    _skipped_work(lazy)


def test_a_reviewer_who_accepts_fewer_steps_says_so_in_the_case():
    """An improvement that needs fewer steps is the reviewer's decision: subset mode, a lower floor."""
    case = harvested(pydantic_ai_agent.run_scenario("happy"))
    spec = {**case.trajectory(), "mode": "subset"}
    relaxed = case.model_copy(update={"checks": [spec if c is case.trajectory() else c for c in case.checks]})
    relaxed = relaxed.model_copy(update={"min_steps": 0})
    (r,) = replay([relaxed], lazy_pydantic_ai).results
    assert r.passed, r.reasons()  # made visible in the case file's diff, not a silent pass


# -- deferred and approval runs -------------------------------------------------------------------
def test_a_pydantic_ai_run_awaiting_approval_replays_green_on_the_agent_that_made_it():
    spans = pydantic_ai_agent.run_scenario("denied")  # run 1 pauses on issue_refund's approval
    case = harvested(spans, 0)
    assert case.recorded.stop == "deferred" and case.recorded.awaiting == ["issue_refund"]
    assert case.recorded.denied == [] and "deferred" in case.tags and case.source.failure_kind is None
    assert case.checks[:2] == [
        {"check": "stopped_with", "stop": "deferred"},
        {"check": "awaiting", "tools": ["issue_refund"]},
    ]
    (same,) = replay([case], pydantic_ai_build("denied")).results
    assert same.passed, same.reasons()
    assert same.stop == "deferred" and same.live_calls == 0

    def answers_instead() -> Agent:
        agent = Agent(
            FunctionModel(_answers_at_once), name=pydantic_ai_agent.AGENT_NAME, output_type=[str, DeferredToolRequests]
        )
        agent.tool_plain(requires_approval=True)(tools.issue_refund)
        return agent

    (other,) = replay([case], answers_instead).results
    assert not other.passed
    assert any(c.name == "awaiting(issue_refund)" and c.passed is False for c in other.checks)


def test_a_langchain_run_interrupted_for_a_human_replays_green_on_the_agent_that_made_it():
    spans = langchain_agent.run_scenario("denied")  # interrupted before issue_refund, then resumed
    runs = runs_from_spans(spans)
    paused = next(r for r in runs if r.stop == "deferred")
    case = case_from_run(paused).model_copy(update={"status": "accepted"})
    assert case.recorded.awaiting == ["issue_refund"] and case.recorded.denied == []
    (same,) = replay([case], lambda: langchain_agent.build_agent("denied")).results
    assert same.passed, same.reasons()
    assert same.stop == "deferred"


# -- the floor and the reviewer's choice ----------------------------------------------------------
def test_min_steps_is_a_floor_that_names_the_skipped_tools():
    from harvester import checks
    from tests.builders.runs import call, run

    floor = checks.min_steps(2, ["kb_search", "get_order"])
    assert floor(run(call("kb_search"), call("get_order"))) == (True, "2 tool calls (min 2)")
    assert floor(run(call("kb_search"))) == (
        False,
        "1 tool call, the recording needed at least 2: skipped get_order",
    )
    assert floor(run(call("kb_search"), call("kb_search", status="blocked")))[0] is False  # denied: no work
    assert checks.from_spec({"check": "min_steps", "n": 1}).label() == "min_steps(1)"


def test_review_changes_the_trajectory_mode_and_can_drop_the_check(tmp_path):
    from click.testing import CliRunner

    from harvester.case import CaseFolder
    from harvester.cli import main as cli

    folder = CaseFolder(tmp_path)
    case = harvested(pydantic_ai_agent.run_scenario("happy")).model_copy(update={"status": "pending"})
    folder.save(case)
    args = ["review", case.id, "--cases", str(tmp_path)]
    res = CliRunner().invoke(cli, args, input="e\ntrajectory\nsubset\nexact\ns\n")
    assert res.exit_code == 0, res.output
    spec = folder.load(case.id).trajectory()
    assert (spec["mode"], spec["args"]) == ("subset", "exact") and len(spec["reference"]) == 2
    assert "trajectory_match(subset, args exact: kb_search -> get_order)" in res.output  # shown at once
    res = CliRunner().invoke(cli, args, input="e\ntrajectory\n-\ns\n")
    assert res.exit_code == 0, res.output
    assert folder.load(case.id).trajectory() is None


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"mode": "sideways"}, "mode must be one of strict, unordered, subset, superset"),
        ({"reference": {"name": "kb_search"}}, "reference must be a list of calls"),
        ({"overrides": {"get_order": "loose"}}, "overrides['get_order'] must be one of exact, ignore"),
    ],
)
def test_a_bad_trajectory_match_in_a_case_file_is_one_line_exit_2(tmp_path, change, needle):
    import orjson
    from click.testing import CliRunner

    from harvester.case import save_case
    from harvester.cli import main as cli

    case = harvested(pydantic_ai_agent.run_scenario("happy"))
    path = save_case(case, tmp_path)
    data = orjson.loads(path.read_bytes())
    at = next(i for i, c in enumerate(data["checks"]) if c["check"] == "trajectory_match")
    data["checks"][at].update(change)
    path.write_bytes(orjson.dumps(data))
    before = path.read_bytes()
    for args in (["cases", "list"], ["replay", "--agent", "tests.frameworks.pydantic_ai_agent:build_agent"]):
        res = CliRunner().invoke(cli, [*args, "--cases", str(tmp_path)])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and path.name in lines[0] and f"checks[{at}]" in lines[0] and needle in lines[0]
    assert path.read_bytes() == before


def test_a_stricter_mode_chosen_in_review_keeps_the_failed_attempt_and_passes_on_the_same_agent(tmp_path):
    from click.testing import CliRunner

    from harvester.case import CaseFolder
    from harvester.cli import main as cli

    folder = CaseFolder(tmp_path)
    case = harvested(pydantic_ai_agent.run_scenario("retry"))  # get_order(B2002) fails, the model retries
    assert [c["args"]["order_id"] for c in case.trajectory()["reference"]] == ["A1001"]  # superset: the work
    folder.save(case.model_copy(update={"status": "pending"}))
    args = ["review", case.id, "--cases", str(tmp_path)]
    assert CliRunner().invoke(cli, args, input="e\ntrajectory\nstrict\nexact\ns\n").exit_code == 0
    strict = folder.load(case.id)
    assert [c["args"]["order_id"] for c in strict.trajectory()["reference"]] == ["B2002", "A1001"]
    (r,) = replay([strict.model_copy(update={"status": "accepted"})], pydantic_ai_build("retry")).results
    assert r.passed, r.reasons()


# -- refresh ----------------------------------------------------------------------------------------
def test_rerecord_refreshes_a_stale_pydantic_ai_case_and_keeps_the_reviewers_edits():
    """v1 of the agent answers from the policy; v2 also looks the order up. The v1 case is stale
    (get_order has no fixture); rerecorded from a v2 production run it replays green on v2."""
    from pydantic_ai.messages import ModelRequest, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from harvester.harvest import rerecord
    from tests.frameworks._otel import capture, finished

    def version(calls):
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            done = [
                p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
            ]
            if done:
                return ModelResponse(parts=[TextPart(" / ".join(str(p.content) for p in done))])
            return ModelResponse(parts=[ToolCallPart(n, a, f"c{i}") for i, (n, a) in enumerate(calls)])

        def build(instrument=None) -> Agent:
            agent = Agent(FunctionModel(respond, model_name="m"), name=pydantic_ai_agent.AGENT_NAME)
            agent.tool_plain(tools.kb_search)
            agent.tool_plain(pydantic_ai_agent.get_order)
            agent.instrument = instrument
            return agent

        return build

    v1 = version([("kb_search", {"query": "refund policy"})])
    v2 = version([("kb_search", {"query": "refund policy"}), ("get_order", {"order_id": "A1001"})])

    def production(build) -> Any:
        provider, exporter = capture()
        build(InstrumentationSettings(tracer_provider=provider)).run_sync("Can I still return order A1001?")
        return runs_from_spans(finished(exporter))[0]

    reviewed = case_from_run(production(v1)).model_copy(
        update={
            "status": "accepted",
            "why": "the return window must come from the policy",
            "tags": ["typical", "billing"],
            "required_elements": ["30 days"],
            "forbidden_tools": ["issue_refund"],
        }
    )
    (stale,) = replay([reviewed], v2).results
    assert not stale.passed and stale.no_fixture == 1
    refreshed, changes = rerecord(reviewed, production(v2))
    assert '+ fixture get_order({"order_id":"A1001"})' in changes
    assert (
        refreshed.why,
        refreshed.tags,
        refreshed.required_elements,
        refreshed.forbidden_tools,
        refreshed.status,
    ) == (
        reviewed.why,
        reviewed.tags,
        reviewed.required_elements,
        reviewed.forbidden_tools,
        "accepted",
    )
    assert [c["name"] for c in refreshed.trajectory()["reference"]] == ["kb_search", "get_order"]
    (fresh,) = replay([refreshed], v2).results
    assert fresh.passed, fresh.reasons()
