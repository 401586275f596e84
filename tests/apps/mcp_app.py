"""A pydantic-ai agent whose tools live behind stdio MCP servers (``tests.apps.mcp_server``), written as
pydantic-ai's docs write one: ``MCPToolset`` over a stdio transport, ``agent.instrument = True`` on the
global tracer provider (where the MCP client's own spans go too). ``build()`` returns the ``Agent``.

``HARVESTER_TEST_MCP_TOOLSETS`` picks how the servers are attached (``LAYOUTS``): ``one`` (one server,
``id="shop"``), ``prefixed`` (as ``load_mcp_toolsets`` does: ``id="shop"``, then ``.prefixed("shop")``, so
the model sees ``shop_kb_search``), ``two`` (two servers without an id, one with the lookups, one with
the refund). The servers append to the file ``HARVESTER_TEST_MCP_LOG`` names: ``started`` when one
starts, ``call <tool>`` when a tool body runs."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

from tests.frameworks import pydantic_ai_agent as driver

from . import shop

LOG_ENV = "HARVESTER_TEST_MCP_LOG"
LAYOUT_ENV = "HARVESTER_TEST_MCP_TOOLSETS"
LAYOUTS = ("one", "prefixed", "two")
ROOT = Path(__file__).resolve().parents[2]
SKIPS_ORDER = "skips_order"  # a variant of the shop's script: answers without looking the order up
_STEPS = {**shop.STEPS, SKIPS_ORDER: [[("kb_search", {"query": "refund policy"}, "call_1")], shop.ANSWER]}


def _prefixed(steps: list[Any], prefix: str) -> list[Any]:
    return [s if isinstance(s, str) else [(f"{prefix}_{n}", a, c) for n, a, c in s] for s in steps]


for _name, _steps in _STEPS.items():
    driver.SCRIPTS[f"shop-{_name}"] = _steps
    driver.SCRIPTS[f"mcp-prefixed-{_name}"] = _prefixed(_steps, "shop")


def log_path() -> Path:
    return Path(os.environ.get(LOG_ENV) or Path(tempfile.gettempdir()) / "harvester-mcp-server.log")


def server(*tools: str, id: str | None = None) -> MCPToolset:
    """A toolset over a stdio server of ``tools`` (all of the shop's by default)."""
    from fastmcp.client.transports import StdioTransport

    args = ["-m", "tests.apps.mcp_server", str(log_path()), *tools]
    return MCPToolset(StdioTransport(command=sys.executable, args=args, cwd=str(ROOT)), id=id)


def build() -> Agent:
    layout = os.environ.get(LAYOUT_ENV, "one")
    scenario = shop.scenario()
    if layout == "prefixed":
        toolsets: list[Any] = [server(id="shop").prefixed("shop")]
        scenario = f"mcp-prefixed-{shop.variant()}"
    elif layout == "two":
        toolsets = [server("kb_search", "get_order"), server("issue_refund")]
    else:
        toolsets = [server(id="shop")]
    agent = Agent(driver._scripted(scenario), name="support_agent", toolsets=toolsets)
    agent.instrument = True  # the global provider, where the MCP client's spans go too
    return agent


def serve(provider: Any = None) -> None:
    """One production request, traced onto the global provider."""
    build().run_sync(shop.PROMPT)
