"""Whether a LangGraph graph can only be awaited: then replay runs it through ``ainvoke``, as production had to.

Decided before the run, from the graph's parts, rather than by retrying ``ainvoke`` after ``invoke``
failed: by then earlier nodes may have called the model and been served tools, which a second run
would repeat. A part seen that the run never reaches only makes a sync graph awaited, which runs its
sync nodes in worker threads the executor follows.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["async_only"]

# LangChain's agent middleware hooks a node calls, sync then async: ``create_agent`` wraps the model call
# (and a ``ToolNode`` each tool call) in every middleware's hook, where one with only the async form
# raises ``NotImplementedError`` in ``invoke``. Its ``before_*``/``after_*`` hooks are nodes of their own.
_WRAPS = (("wrap_model_call", "awrap_model_call"), ("wrap_tool_call", "awrap_tool_call"))
_DEPTH = 6  # closures followed from a node's function: create_agent's middleware is four deep


def async_only(graph: Any) -> bool:
    """Some part of the graph has no sync implementation, so ``invoke`` would fail on reaching it ("No
    synchronous function provided"): an ``async def`` node or router, a ``RunnableLambda`` of a coroutine,
    a ``@tool async def``, the same in a subgraph or a functional ``@entrypoint``; or a ``create_agent``
    middleware with only ``awrap_model_call``/``awrap_tool_call`` (``@wrap_model_call async def``).
    Code a node only reaches at run time (a runnable a function builds) is not seen, nor a sync method
    that is there but raises (a chat model with only ``_agenerate`` working)."""
    from langchain_core.runnables import Runnable
    from langgraph.pregel import Pregel

    middleware = _middleware_type()
    seen: set[int] = set()
    stack: list[Any] = [graph]
    while stack:
        part = stack.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        if _no_sync(part) or (middleware is not None and _async_middleware(part, middleware)):
            return True
        if isinstance(part, Pregel):  # its nodes, and their writers (a conditional edge is one)
            stack.extend(r for node in part.nodes.values() for r in (node.bound, *node.writers))
            continue
        stack.extend(v for v in _held(part) if isinstance(v, Runnable))
        # the object a part calls a method of: a conditional edge's BranchSpec holds the router
        owners = (getattr(getattr(part, name, None), "__self__", None) for name in ("func", "afunc"))
        stack.extend(owner for owner in owners if owner is not None)
    return False


def _no_sync(part: Any) -> bool:
    """LangGraph's ``RunnableCallable`` and LangChain's ``RunnableLambda`` with only an ``afunc``; a tool
    with only a ``coroutine``."""
    return getattr(part, "func", None) is None and any(
        getattr(part, name, None) is not None for name in ("afunc", "coroutine")
    )


def _held(part: Any) -> Iterator[Any]:
    """A part's attributes (a named tuple's fields), one list or dict deep: a sequence's steps, a
    ``ToolNode``'s tools."""
    for value in part if isinstance(part, tuple) else vars(part).values() if hasattr(part, "__dict__") else ():
        if isinstance(value, dict):
            yield from value.values()
        elif isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def _middleware_type() -> type | None:
    try:
        from langchain.agents.middleware import AgentMiddleware
    except ImportError:  # LangGraph alone, or a LangChain before its agent middleware
        return None
    return AgentMiddleware


def _async_middleware(part: Any, middleware: type) -> bool:
    """A middleware the part's functions reach (the model node's ``func``, a ``ToolNode``'s wrapper) that
    overrides a wrap hook's async form only."""
    functions = [v for v in _held(part) if callable(v) and not isinstance(v, type)]
    return any(
        getattr(type(m), sync) is getattr(middleware, sync)
        and getattr(type(m), asynchronous) is not getattr(middleware, asynchronous)
        for m in _reached(functions, middleware)
        for sync, asynchronous in _WRAPS
    )


def _reached(functions: list[Any], wanted: type) -> Iterator[Any]:
    """The ``wanted`` objects the functions hold in their closures, a bound method's instance, a
    partial's function and a wrapper's ``__wrapped__``, ``_DEPTH`` levels deep."""
    seen: set[int] = set()
    level = functions
    for _ in range(_DEPTH):
        following: list[Any] = []
        for obj in level:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, wanted):
                yield obj
            elif isinstance(obj, types.MethodType):
                following += (obj.__self__, obj.__func__)
            elif isinstance(obj, functools.partial):
                following += (obj.func, *obj.args)
            elif isinstance(obj, types.FunctionType):
                following += _cells(obj)
                wrapped = getattr(obj, "__wrapped__", None)
                following += [wrapped] if wrapped is not None else []
            elif isinstance(obj, (list, tuple)):
                following += obj
        level = following


def _cells(function: types.FunctionType) -> list[Any]:
    out = []
    for cell in function.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    return out
