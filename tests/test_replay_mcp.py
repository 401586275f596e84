"""MCP tools behind pydantic-ai: a real stdio MCP server (``tests.apps.mcp_server``) reached through
pydantic-ai's ``MCPToolset``, traced as production traces it (pydantic-ai's spans, and the MCP client's
own ``tools/call`` span inside each tool span). Each call is one call in capture and in replay, the case
is accepted as harvested, and a replay never starts the server: its tool list comes from the recording."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.case import load_cases
from harvester.model import Run
from harvester.replay import replay as replay_cases
from harvester.store import TraceStore
from tests.apps import mcp_app, shop
from tests.builders.capture import capturing_globally
from tests.builders.project import CONFIG, enter_project, harvest_and_accept, replay

MCP_CONFIG = CONFIG.replace('"issue_refund"', '"issue_refund", "shop_issue_refund"')  # the prefixed layout's too
TARGET = "tests.apps.mcp_app:build"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(mcp_app.LOG_ENV, str(tmp_path / "server.log"))
    yield enter_project(tmp_path, monkeypatch, config=MCP_CONFIG)


def server_log(project: Path) -> list[str]:
    log = project / "server.log"
    return log.read_text().splitlines() if log.exists() else []


def capture_production(project: Path) -> Run:
    with capturing_globally(str(project / "traces.db")):
        mcp_app.serve()
    log = server_log(project)
    # the two lookups run in parallel (on two servers in the "two" layout): their order in the log is not fixed
    calls = sorted(c for c in log if c.startswith("call"))
    assert log[0] == "started" and calls == ["call get_order", "call kb_search"]
    (project / "server.log").unlink()
    with TraceStore(str(project / "traces.db")) as ts:
        (run,) = ts.runs()
    return run


@pytest.mark.slow
def test_an_mcp_call_traced_twice_is_one_call(project: Path) -> None:
    """The MCP client's span (``tools/call``: execute_tool, the tool's name, no payloads) sits inside
    pydantic-ai's tool span of the same call: one call, with the payloads of the span that has them."""
    run = capture_production(project)
    assert [(c.name, c.args, c.status) for c in run.calls] == [
        ("kb_search", {"query": "refund policy"}, "ok"),
        ("get_order", {"order_id": "A1001"}, "ok"),
    ]
    assert run.calls[1].result == shop.ORDERS["A1001"] and run.calls[0].call_id == "call_1"
    assert run.content_captured and run.steps == 2
    # what the server offered the model, for a replay to list without starting it
    assert [(t.name, t.toolset) for t in run.mcp_tools] == [
        ("kb_search", "shop"),
        ("get_order", "shop"),
        ("issue_refund", "shop"),
    ]
    assert run.mcp_tools[0].input_schema["required"] == ["query"]
    assert run.mcp_tools[2].annotations and run.mcp_tools[2].annotations["destructiveHint"] is True


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["one", "prefixed"])
def test_an_mcp_agent_is_harvested_accepted_and_replayed_without_its_server(
    layout: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One server with an id, or as ``load_mcp_toolsets`` attaches one (an id, then a prefix, which hides
    the id from the spans: the replay takes the prefix off the recorded names)."""
    monkeypatch.setenv(mcp_app.LAYOUT_ENV, layout)
    prefix = "shop_" if layout == "prefixed" else ""
    capture_production(project)
    case = harvest_and_accept(project)
    assert [f["tool"] for f in case["fixtures"]] == [f"{prefix}kb_search", f"{prefix}get_order"]
    assert [t["name"] for t in case["recorded"]["mcp_tools"]] == [
        f"{prefix}{t}" for t in ("kb_search", "get_order", "issue_refund")
    ]

    code, report = replay(TARGET, "baseline", monkeypatch, "baseline.json")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert r.trajectory == [f"{prefix}kb_search", f"{prefix}get_order"] and r.tool_calls == 2
    assert r.live_calls == 0 and r.no_fixture == 0 and not r.notes
    assert server_log(project) == [], "the replay started the MCP server"

    # with no model at all: the model calls answered from the recording, the MCP tools offered as recorded
    code, report = replay(TARGET, "no_model", monkeypatch, "recorded.json", "--model", "recorded")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert r.model is not None and r.model.served == 2 and r.model.drift is None, r.model

    code, report = replay(TARGET, mcp_app.SKIPS_ORDER, monkeypatch, "skipped.json")
    (r,) = report.results
    assert code == 1 and not r.passed and r.trajectory == [f"{prefix}kb_search"]
    assert any(c.name.startswith("trajectory_match") and not c.passed for c in r.checks), r.reasons()

    code, report = replay(TARGET, "new_args", monkeypatch, "new_args.json")
    (r,) = report.results
    assert code == 1 and not r.passed and r.no_fixture == 1
    (call,) = r.no_fixture_calls
    assert call.tool == f"{prefix}get_order" and call.args == {"order_id": "A1002"}

    code, report = replay(TARGET, "mutating", monkeypatch, "mutating.json")
    (r,) = report.results
    assert code == 1 and r.unauthorised == 1
    assert server_log(project) == [], "a replay started the MCP server"


@pytest.mark.slow
def test_servers_whose_tools_cannot_be_told_apart_start_and_say_why(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers without an id or a prefix: the spans do not say which offered which tool, so the replay
    starts both (as production does) and the report says why, once per server; the calls are still served."""
    monkeypatch.setenv(mcp_app.LAYOUT_ENV, "two")
    capture_production(project)
    case = harvest_and_accept(project)
    cases = load_cases(project / "cases")
    (sealed,) = replay_cases(cases, mcp_app.build).results  # the seal: the server command is not allowed
    assert not sealed.passed and server_log(project) == []
    refused = " ".join(c.detail for c in sealed.checks if c.name == "sealed" and c.passed is False)
    assert f"start {sys.executable} -m tests.apps.mcp_server" in refused and "replay.allow_commands" in refused
    allowed = [f"{sys.executable} -m tests.apps.mcp_server"]
    report = replay_cases(cases, mcp_app.build, allow_commands=allowed)
    (r,) = report.results
    assert r.passed and r.live_calls == 0 and r.tool_calls == 2, r.reasons()
    assert len(r.notes) == 2 and all("give each MCPToolset an id=" in n for n in r.notes), r.notes
    said = [line for line in report.summary().splitlines() if line.startswith("note (1 case): MCP server")]
    assert len(said) == 2 and all("started as in production" in line for line in said), report.summary()
    assert report.summary().count("give each MCPToolset an id=") == 2  # the terminal says why, not only the JSON
    assert server_log(project) == ["started", "started"], "both servers started, no tool body ran"
    assert case["recorded"]["mcp_tools"][0]["toolset"] is None


def test_a_refund_before_the_lookup_on_an_mcp_server_fails_on_order(project: Path, monkeypatch: pytest.MonkeyPatch):
    """Production looks the order up on the server, then refunds it there: the harvested case keeps that
    order, and the replay that refunds first fails naming the refund, without the server started."""
    monkeypatch.setenv(shop.VARIANT_ENV, "refund")
    with capturing_globally(str(project / "traces.db")):
        mcp_app.serve()
    (project / "server.log").unlink()
    case = harvest_and_accept(project)
    assert case["order"] == [{"call": "issue_refund", "after": ["get_order"]}]
    code, report = replay(TARGET, "refund", monkeypatch, "refund.json")
    assert code == 0 and report.results[0].passed, report.results[0].reasons()
    code, report = replay(TARGET, "reorder", monkeypatch, "reorder.json")
    (r,) = report.results
    failed = {c.name: c.detail for c in r.checks if c.passed is False}
    assert code == 1 and list(failed) == ["call_order(issue_refund after get_order)"], failed
    assert failed["call_order(issue_refund after get_order)"].startswith("issue_refund came too early")
    assert server_log(project) == [], "the replay started the MCP server"
