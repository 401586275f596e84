"""The recorded model (``replay(model=...)``, ``--model``): each model call of the agent is answered from
the case's model fixtures while its request matches the recorded one; the first that does not is a drift
named by what changed (``model_input_changed``), or, with ``recorded-then-live``, where the live model
took over. The agent is an own loop that asks ``seam.model_server()`` as every framework guard does; its
live model is a provider on 127.0.0.1, so the seal and the provider's log show whether it was reached."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.canonical import fixture_key
from harvester.case import AgentCase, save_case
from harvester.cli import main
from harvester.replay import replay
from harvester.report import CaseResult, Report, render_html
from tests.apps import recorded_model_app as app
from tests.builders.backends import Loopback, loopback, routes
from tests.builders.cli import one_line_error

PROMPT = "Can I return A1001?"
RESULT = "Refunds within 30 days."
RECORDED_ANSWER = "You can return it within 30 days."
LIVE_ANSWER = "Live: returns are accepted within 30 days."
CALL = {"name": "kb_search", "call_id": "call_1", "args": {"query": "refund policy"}}
KNOBS = ("RM_SYSTEM", "RM_TOOL", "RM_PROMPT_PREFIX", "RM_TEMPERATURE", "RM_EXTRA_CALL", "RM_UNGUARDED")


def _answer(text: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "text": text,
        "tool_calls": calls,
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": {"input_tokens": 50, "output_tokens": 8},
        "model": "gpt-4o",
    }


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    """The live model on 127.0.0.1, answering every request with a final answer; the candidate unchanged."""
    for knob in KNOBS:
        monkeypatch.delenv(knob, raising=False)
    with loopback(routes({"/v1/model": _answer(LIVE_ANSWER, [])})) as server:
        monkeypatch.setenv(app.URL_ENV, f"{server.origin}/v1/model")
        yield server


def turns(prompt: str = PROMPT, **turn: Any) -> list[dict[str, Any]]:
    """The recording of the unchanged agent's run: kb_search asked for, then the answer."""
    first = [app.user(prompt)]
    second = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [CALL], "tool_call_id": None},
        {"role": "tool", "content": RESULT, "tool_calls": [], "tool_call_id": "call_1"},
    ]
    return [
        {"request": app.request(first), "answer": _answer(None, [CALL]), "streamed": False, "truncated": False},
        {"request": app.request(second), "answer": _answer(RECORDED_ANSWER, []), "streamed": False, **turn},
    ]


def case(server: Loopback, model_fixtures: list[dict[str, Any]] | None, cid: str = "refund", prompt: str = PROMPT):
    spec = AgentCase.model_validate(
        {
            "id": cid,
            "status": "accepted",
            "prompt": prompt,
            "why": "returns are answered from the policy",
            "required_elements": ["30 days"],
            "fixtures": [
                {
                    "key": fixture_key("kb_search", {"query": "refund policy"}),
                    "tool": "kb_search",
                    "args": {"query": "refund policy"},
                    "result": RESULT,
                }
            ],
            "recorded": {"trajectory": ["kb_search"], "model_hosts": [f"127.0.0.1:{server.port}"]},
        }
    )
    if model_fixtures is not None:  # the case file's ``model_fixtures`` (issue 30's fixtures part)
        if "model_fixtures" in AgentCase.model_fields:
            return AgentCase.model_validate(
                {**spec.model_dump(mode="json", by_alias=True), "model_fixtures": model_fixtures}
            )
        object.__setattr__(spec, "model_fixtures", model_fixtures)
    return spec


def one(report: Report) -> CaseResult:
    (result,) = report.results
    return result


def drift_detail(result: CaseResult) -> str:
    check = next((c for c in result.checks if c.name == "model_input_changed"), None)
    assert check is not None and check.passed is False, result.checks
    return check.detail


def test_matching_requests_are_served_from_the_recording_and_no_model_is_reached(provider):
    report = replay([case(provider, turns())], app.build, model="recorded", timeout=30)
    result = one(report)
    assert result.passed, result.reasons()
    assert result.answer == RECORDED_ANSWER and provider.seen == []
    assert result.model is not None and (result.model.served, result.model.recorded) == (2, 2)
    assert result.model.drift is None and result.model.live_from is None
    assert report.model == "recorded"
    assert (
        report.model_line()
        == "model recorded: 1 served from the recording; usage and cost of 2 served steps as recorded"
    )


def test_live_mode_calls_the_model_as_before(provider):
    result = one(replay([case(provider, turns())], app.build, timeout=30))
    assert result.passed and result.answer == LIVE_ANSWER and len(provider.seen) == 1
    assert result.model is None


def test_a_changed_system_prompt_fails_with_a_line_diff(provider, monkeypatch):
    recorded = case(provider, turns())
    monkeypatch.setenv("RM_SYSTEM", app.SYSTEM.replace("Never refund without approval.", "Refund whenever asked."))
    report = replay([recorded], app.build, model="recorded", timeout=30)
    result = one(report)
    assert not result.passed and provider.seen == []
    assert drift_detail(result) == (
        'model_input_changed at step 1: system prompt: -"Never refund without approval." +"Refund whenever asked."'
    )
    assert result.model is not None and result.model.drift is not None
    assert (result.model.drift.step, result.model.drift.what, result.model.served) == (1, ["system prompt"], 0)
    assert report.model_line() == "model recorded: 0 served from the recording, 1 drifted (system prompt)"


@pytest.mark.parametrize(
    ("knob", "value", "change"),
    [
        ("RM_TOOL", "add:issue_refund", "tools: added issue_refund"),
        ("RM_TOOL", "schema", "tools: schema changed kb_search"),
        ("RM_PROMPT_PREFIX", "URGENT: ", f'message 1 (user): -"{PROMPT}" +"URGENT: {PROMPT}"'),
        ("RM_TEMPERATURE", "0.7", "settings: temperature 0 -> 0.7"),
    ],
)
def test_each_kind_of_drift_is_named(provider, monkeypatch, knob, value, change):
    recorded = case(provider, turns())
    monkeypatch.setenv(knob, value)
    result = one(replay([recorded], app.build, model="recorded", timeout=30))
    assert drift_detail(result) == f"model_input_changed at step 1: {change}"
    assert provider.seen == []


def test_more_model_calls_than_the_recording_is_a_drift(provider, monkeypatch):
    monkeypatch.setenv("RM_EXTRA_CALL", "1")
    result = one(replay([case(provider, turns())], app.build, model="recorded", timeout=30))
    assert drift_detail(result) == (
        "model_input_changed at step 3: the agent made more model calls than the recording: step 3 "
        "(the recording has 2)"
    )
    assert result.model is not None and result.model.served == 2 and provider.seen == []


@pytest.mark.parametrize(
    ("knob", "value", "live_from", "served"), [("RM_SYSTEM", "Be brief.", 1, 0), ("RM_EXTRA_CALL", "1", 3, 2)]
)
def test_recorded_then_live_continues_on_the_live_model_and_says_so(
    provider, monkeypatch, knob, value, live_from, served
):
    recorded = case(provider, turns())
    monkeypatch.setenv(knob, value)
    report = replay([recorded], app.build, model="recorded-then-live", timeout=30)
    result = one(report)
    assert result.passed, result.reasons()  # judged as any run: the live answer holds "30 days"
    assert len(provider.seen) == 1  # the live model answered from the drifted step on
    assert result.model is not None and (result.model.live_from, result.model.served) == (live_from, served)
    assert all(c.name != "model_input_changed" for c in result.checks)
    assert f"continued on the live model from step {live_from}" in (result.differences() or "")
    assert "1 continued live" in (report.model_line() or "")


def test_the_seal_allows_no_model_host_in_recorded_mode(provider, monkeypatch):
    """A model call nothing served (here: a loop that never asks) is refused, though the recording
    names the host; ``recorded-then-live`` keeps the recording's model hosts."""
    monkeypatch.setenv("RM_UNGUARDED", "1")
    result = one(replay([case(provider, turns())], app.build, model="recorded", timeout=30))
    sealed = next(c for c in result.checks if c.name == "sealed")
    assert sealed.passed is False and f"connect to 127.0.0.1:{provider.port}" in sealed.detail
    assert "not a model host" in sealed.detail and provider.seen == []
    live = one(replay([case(provider, turns())], app.build, model="recorded-then-live", timeout=30))
    assert live.passed and len(provider.seen) == 1


def test_a_case_without_model_fixtures_is_not_run_in_recorded_mode(provider):
    report = replay([case(provider, None)], app.build, model="recorded", timeout=30)
    result = one(report)
    assert result.errored and not result.passed and result.tool_calls == 0 and provider.seen == []
    check = next(c for c in result.checks if c.name == "recorded_model")
    assert "cannot be replayed with the recorded model: the case has no model fixtures" in check.detail
    assert report.model_line() == "model recorded: 0 served from the recording, 1 without a servable recording"
    live = one(replay([case(provider, None)], app.build, model="recorded-then-live", timeout=30))
    assert live.passed and live.model is not None and live.model.live_from == 1 and len(provider.seen) == 1


def test_a_truncated_model_fixture_makes_the_case_unservable(provider):
    result = one(replay([case(provider, turns(truncated=True))], app.build, model="recorded", timeout=30))
    assert result.errored and provider.seen == []
    assert result.model is not None and result.model.unservable is not None
    assert "model fixture 2 is truncated" in result.model.unservable


def test_concurrent_cases_each_have_their_own_recording(provider):
    """Eight cases in flight at once: the four whose recording asked another question drift, alone."""
    cases = [
        case(provider, turns(PROMPT if i % 2 == 0 else f"Order B{i}?"), cid=f"c{i}", prompt=PROMPT) for i in range(8)
    ]
    report = replay(cases, app.build, model="recorded", concurrency=8, timeout=30)
    assert {r.id: r.passed for r in report.results} == {f"c{i}": i % 2 == 0 for i in range(8)}
    assert all(r.model is not None and r.model.served == (2 if i % 2 == 0 else 0) for i, r in enumerate(report.results))
    assert (
        report.model_line()
        == "model recorded: 4 served from the recording, 4 drifted (message); usage and cost of 8 served steps "
        "as recorded"
    )


def test_every_rendering_shows_the_drift_and_an_older_baseline_still_compares(provider, monkeypatch, tmp_path):
    recorded = case(provider, turns())
    monkeypatch.setenv("RM_TOOL", "add:issue_refund")
    report = replay([recorded], app.build, model="recorded", timeout=30)
    data = orjson.loads(report.to_json())
    assert data["model"] == "recorded"
    assert data["results"][0]["model"]["drift"] == {
        "step": 1,
        "what": ["tools"],
        "changes": ["tools: added issue_refund"],
    }
    again = Report.from_data(data)
    assert again.results[0].model == report.results[0].model
    line = "model_input_changed at step 1: tools: added issue_refund"
    assert line in report.to_markdown() and "1 drifted (tools)" in report.to_markdown()
    assert line in report.summary() and "1 drifted (tools)" in report.summary()
    html = render_html(report, None)
    assert "model_input_changed at step 1" in html and "tools: added issue_refund" in html
    older = Report(suite="suite", results=[CaseResult(id="refund", passed=True)])  # before --model existed
    older.save(tmp_path / "base.json")
    assert report.compare(Report.load(tmp_path / "base.json")).regressed == ["refund"]


AGENT = textwrap.dedent("""
    def build(tools):
        return lambda prompt: "Answer: " + str(tools.execute("kb_search", {"query": "refund policy"}))
""")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "rm_cli_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    (tmp_path / "harvester.toml").write_text('cases_dir = "cases"\n')
    with loopback(routes({})) as server:
        save_case(case(server, None), tmp_path / "cases")
    return tmp_path


def test_the_cli_takes_the_mode_from_the_option_or_the_config(project):
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build", "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["model"] == "live"
    (project / "harvester.toml").write_text('cases_dir = "cases"\n[replay]\nmodel = "recorded"\n')
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build", "--json"])
    data = orjson.loads(result.stdout)
    assert data["model"] == "recorded" and data["results"][0]["errored"]  # no model fixtures: not run
    assert "model recorded: 0 served from the recording, 1 without a servable recording" in result.stderr
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build", "--json", "--model", "live"])
    assert orjson.loads(result.stdout)["model"] == "live"


def test_an_unknown_mode_is_one_line(project):
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build", "--model", "bogus"])
    one_line_error(result, "--model 'bogus'", "live, recorded, recorded-then-live")


def test_a_bad_mode_in_the_config_names_the_file_and_field(project):
    (project / "harvester.toml").write_text('cases_dir = "cases"\n[replay]\nmodel = "replayed"\n')
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build"])
    one_line_error(result, "harvester.toml", "replay.model")


def test_injecting_failures_needs_a_live_model(project):
    """An injected failure changes what the model reads next, which no recording answers: one line."""
    result = CliRunner().invoke(main, ["replay", "--agent", "rm_cli_agent:build", "--model", "recorded", "--inject"])
    one_line_error(result, "--inject with --model recorded", "recorded-then-live")
    with pytest.raises(ValueError, match="inject needs a live model"):
        replay([], lambda: None, inject=True, model="recorded")
