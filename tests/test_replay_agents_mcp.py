"""An OpenAI Agents SDK agent with a real stdio MCP server (``tests.apps.mcp_server``), as the SDK's docs
write one: ``async with MCPServerStdio(...)`` around ``Runner.run``. Its tool calls are served from the
case like every function tool's, so no tool body runs in the server; the SDK's server lists its own
tools, so it starts as in production, needs ``allow_commands``, and the case says why, once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_trace_processors
from agents.mcp import MCPServerStdio

from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.replay import replay
from tests.apps import shop
from tests.apps.mcp_app import ROOT
from tests.frameworks.openai_agents_agent import ScriptedProvider
from tests.frameworks.pydantic_ai_agent import ANSWERS, PROMPTS

COMMAND = f"{sys.executable} -m tests.apps.mcp_server"


def _case() -> AgentCase:
    calls = [("kb_search", {"query": "refund policy"}), ("get_order", {"order_id": "A1001"})]
    fixtures = [
        {"key": fixture_key(name, args), "tool": name, "args": args, "result": getattr(shop, name)(**args)}
        for name, args in calls
    ]
    return AgentCase.model_validate(
        {
            "id": "mcp",
            "status": "accepted",
            "prompt": PROMPTS["happy"],
            "why": "w",
            "fixtures": fixtures,
            "recorded": {"trajectory": [name for name, _ in calls]},
            "checks": [{"check": "contains", "needles": ["30 days"]}],
        }
    )


def _factory(log: Path) -> Any:
    def build() -> Any:
        async def run(prompt: str) -> str:
            params = {"command": sys.executable, "args": ["-m", "tests.apps.mcp_server", str(log)], "cwd": str(ROOT)}
            async with MCPServerStdio(params=params, name="shop") as server:
                agent = Agent(name="support_agent", instructions="Help.", mcp_servers=[server])
                config = RunConfig(model_provider=ScriptedProvider("happy"))
                return str((await Runner.run(agent, prompt, run_config=config)).final_output)

        return run

    return build


@pytest.fixture(autouse=True)
def _no_export() -> None:
    set_trace_processors([])  # no OpenAI trace export


def test_an_agents_sdk_mcp_server_s_calls_are_served_and_its_start_is_said(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    (refused,) = replay([_case()], _factory(log), timeout=60).results
    assert not refused.passed and not log.exists()
    assert any(c.name == "sealed" and f"start {COMMAND}" in (c.detail or "") for c in refused.checks)

    report = replay([_case()], _factory(log), timeout=60, allow_commands=[COMMAND])
    (r,) = report.results
    assert r.passed and r.live_calls == 0 and r.tool_calls == 2 and r.answer == ANSWERS["happy"], r.reasons()
    assert log.read_text().splitlines() == ["started"], "the server started, and no tool body ran in it"
    (note,) = r.notes
    assert note.startswith("MCP server `shop` started as in production")
    assert f"note (1 case): {note}" in report.summary()
