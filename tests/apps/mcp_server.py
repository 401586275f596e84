"""The shop's tools behind a real stdio MCP server (the ``mcp`` package's ``MCPServer``, its FastMCP).

Started as ``python -m tests.apps.mcp_server LOG [TOOL ...]`` from the repository root, serving the
named tools (all of them by default). It appends ``started`` to the file ``LOG`` when it starts and
``call <tool>`` each time a tool body runs, so a test can tell whether a replay started it or ran a tool.
``issue_refund`` is annotated destructive, as a server says of a tool that acts.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from tests.apps import shop

TOOLS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (shop.kb_search, shop.get_order, shop.issue_refund)}
ANNOTATIONS = {"issue_refund": ToolAnnotations.model_validate({"destructiveHint": True})}


def _logged(fn: Callable[..., Any], log: Path) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with log.open("a") as f:
            f.write(f"call {fn.__name__}\n")
        return fn(*args, **kwargs)

    return run


def main(argv: list[str]) -> None:
    log, names = Path(argv[0]), argv[1:] or list(TOOLS)
    with log.open("a") as f:
        f.write("started\n")
    server = MCPServer("shop")
    for name in names:
        server.add_tool(_logged(TOOLS[name], log), annotations=ANNOTATIONS.get(name))
    server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
