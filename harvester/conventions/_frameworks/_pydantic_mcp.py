"""pydantic-ai's MCP toolsets in a replay: the server's tool list from the recording, the server never started.

An ``MCPToolset`` connects to its server when the agent's run enters it (a stdio server is a process it
starts), lists the server's tools (``tools/list``) and calls them (``tools/call``). In a replay the calls
are served by the case's executor like any toolset's (``pydantic_ai``'s guard on ``call_tool``); here
the entering and the listing are answered from the tools the recording's model calls were offered
(``recorded.mcp_tools``), so the server is neither started nor reached, and a sealed replay needs no
``allow_commands`` entry for it. pydantic-ai's own ``get_tools`` turns the recorded listing into tools,
so their schemas, annotations and metadata are what production had.

A toolset's recorded tools are those of its ``id``; a toolset without one (or whose wrappers hid it)
takes the recorded tools of no id, under the names its wrappers gave them (a ``prefixed()`` toolset's
prefix, a ``renamed()`` one's map), and one with an ``id`` the tools of no id its own wrappers renamed.
The server is started as in production, and the case's report says why once, when the recording lists
none of the toolset's tools, when two toolsets without an ``id`` or a prefix make their tools impossible
to tell apart, or when the toolset hands the model its server's instructions (``include_instructions``),
which the recording does not hold.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ... import seam
from ._patch import guard

__all__ = ["install_mcp"]

_STATE = "_harvester_replay"  # on a toolset: executor -> _Entered
# (toolset, its recorded tools) while the guarded get_tools lists them through list_tools
_listing: contextvars.ContextVar[tuple[Any, list[Any]] | None] = contextvars.ContextVar(
    "harvester_mcp_listing", default=None
)
_NONE_RECORDED = "the recording lists none of its tools (re-harvest the case from a newer trace)"
# executor -> the toolsets entered in its case whose recorded tools have no id of theirs
_untagged: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()


@dataclass
class _Entered:
    """How one case entered one toolset: entries answered without connecting, and how many of those
    connected after all (their tools could not be told apart)."""

    skipped: int = 0
    live: int = 0


def _recorded(ex: Any) -> list[Any]:
    return list(getattr(getattr(getattr(ex, "case", None), "recorded", None), "mcp_tools", None) or ())


def _entry(toolset: Any, ex: Any) -> _Entered | None:
    table = toolset.__dict__.get(_STATE)
    return table.get(ex) if table is not None else None


def _tagged(toolset: Any, recorded: Sequence[Any]) -> bool:
    """The recording names this toolset's tools by its ``id``."""
    own = getattr(toolset, "_explicit_id", None)
    return own is not None and any(t.toolset == own for t in recorded)


def _why_live(toolset: Any, recorded: Sequence[Any]) -> str | None:
    """Why this toolset must connect in a replay (None: its listing comes from the recording)."""
    if getattr(toolset, "include_instructions", False):
        return "it hands the model its server's instructions (include_instructions), which the recording lacks"
    if not _tagged(toolset, recorded) and not any(t.toolset is None for t in recorded):
        return _NONE_RECORDED
    return None


def _server(toolset: Any) -> str:
    """The server a toolset reaches, as its user knows it: the command it starts, its URL, else its id."""
    transport = getattr(getattr(toolset, "client", None), "transport", None)
    command = getattr(transport, "command", None)
    if isinstance(command, str):
        return " ".join([command, *map(str, getattr(transport, "args", None) or ())])
    url = getattr(transport, "url", None)
    return str(url) if url else str(getattr(toolset, "id", None) or toolset.label)


def _note(ex: Any, toolset: Any, why: str) -> None:
    note = getattr(ex, "note", None)
    if note is not None:
        note(f"MCP server `{_server(toolset)}` started as in production: {why}")


def _inner_name(name: str, path: Sequence[Any]) -> str | None:
    """The name the server gave a tool the model saw as ``name`` through the wrappers ``path`` names
    (outermost first); None when a prefix says it is another toolset's."""
    for layer in path:
        if isinstance(layer, str):
            if not name.startswith(layer + "_"):
                return None
            name = name[len(layer) + 1 :]
        elif isinstance(layer, Mapping):  # a rename: original -> new
            name = next((old for old, new in layer.items() if new == name), name)
    return name


def _own_tools(toolset: Any, ctx: Any, ex: Any) -> tuple[list[Any] | None, str]:
    """The recorded tools of ``toolset`` as its server listed them, or None and why they are not known."""
    recorded = _recorded(ex)
    own = getattr(toolset, "_explicit_id", None)
    tagged = _tagged(toolset, recorded)
    path = tuple(getattr(ctx, "_tool_name_path", ()) or ())
    if not tagged and not any(isinstance(layer, str) for layer in path):
        others = [t for t in _untagged.get(ex, ()) if t is not toolset]
        if others:
            return None, "its tools cannot be told from another MCP server's (give each MCPToolset an id=)"
    out = []
    for t in recorded:
        name = _inner_name(t.name, path)
        # its id's, or of no id: all of those if it has none, else those its own wrappers renamed
        if name is not None and (
            (tagged and t.toolset == own) or (t.toolset is None and (not tagged or name != t.name))
        ):
            out.append(t.model_copy(update={"name": name}))
    if not out:
        return None, _NONE_RECORDED
    return out, ""


def _listed(tools: list[Any]) -> list[Any]:
    """The recorded tools as the MCP SDK's ``Tool``s, which pydantic-ai's ``get_tools`` reads."""
    from mcp import types as mcp_types

    return [
        mcp_types.Tool.model_validate(
            {
                "name": t.name,
                "description": t.description,
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
                "annotations": t.annotations,
                "_meta": t.meta,
            }
        )
        for t in tools
    ]


def _make_enter(original: Callable[..., Any]) -> Callable[..., Any]:
    async def __aenter__(self: Any) -> Any:
        ex = seam.route()
        recorded = _recorded(ex)
        if not recorded:  # not a replay, or nothing recorded: as in production
            return await original(self)
        why = _why_live(self, recorded)
        if why is not None:
            _note(ex, self, why)
            return await original(self)
        self.__dict__.setdefault(_STATE, weakref.WeakKeyDictionary()).setdefault(ex, _Entered()).skipped += 1
        if not _tagged(self, recorded):
            _untagged.setdefault(ex, weakref.WeakSet()).add(self)
        return self

    return __aenter__


def _make_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    async def __aexit__(self: Any, *args: Any) -> Any:
        entry = _entry(self, seam.route())
        if entry is None or entry.skipped == 0:
            return await original(self, *args)
        entry.skipped -= 1
        if entry.live > entry.skipped:  # this entry connected after all: disconnect it
            entry.live -= 1
            return await original(self, *args)
        return None

    return __aexit__


def _make_get_tools(original: Callable[..., Any], enter: Callable[..., Any]) -> Callable[..., Any]:
    async def get_tools(self: Any, ctx: Any) -> Any:
        ex = seam.route()
        entry = _entry(self, ex)
        if entry is None or entry.live >= entry.skipped:  # connected: the server lists its tools
            return await original(self, ctx)
        tools, why = _own_tools(self, ctx, ex)
        if tools is None:
            _note(ex, self, why)
            await enter(self)
            entry.live += 1
            return await original(self, ctx)
        token = _listing.set((self, _listed(tools)))
        try:
            return await original(self, ctx)
        finally:
            _listing.reset(token)

    return get_tools


def _make_list_tools(original: Callable[..., Any]) -> Callable[..., Any]:
    async def list_tools(self: Any) -> Any:
        listing = _listing.get()
        if listing is not None and listing[0] is self:
            return listing[1]
        return await original(self)

    return list_tools


def install_mcp(toolset_class: type) -> None:
    """Guard ``MCPToolset``: entering, listing and leaving answered from the recording in a replay."""
    enter = toolset_class.__dict__.get("__aenter__")
    if enter is None:
        return
    guard(toolset_class, "__aenter__", _make_enter)
    guard(toolset_class, "__aexit__", _make_exit)
    guard(toolset_class, "get_tools", lambda original: _make_get_tools(original, enter))
    guard(toolset_class, "list_tools", _make_list_tools)
