"""The normalized Run: what every agent invocation becomes, in production and in replay.

Two forms, one owner: the pydantic ``Run`` (``_run``), which checks and cases read, and its
plain-dict form ``RunData`` (``_data``), which capture, ingest and the store hand each other; the
only conversions are ``Run.to_data()`` and ``Run.from_data()``. The models load on first use, so
the production hook, which only handles ``RunData``, imports no pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._data import (
    STOPS,
    CallData,
    CallStatus,
    ErrorData,
    LlmCallData,
    RequestData,
    RunData,
    Stop,
    UsageData,
    data_failed,
    data_with_derived,
)

if TYPE_CHECKING:
    from ._run import ErrorInfo, LlmCall, Run, ToolCall, ToolRequest, Usage

_MODELS = ("ErrorInfo", "LlmCall", "Run", "ToolCall", "ToolRequest", "Usage")

__all__ = [
    "STOPS",
    "CallData",
    "CallStatus",
    "ErrorData",
    "ErrorInfo",
    "LlmCall",
    "LlmCallData",
    "RequestData",
    "Run",
    "RunData",
    "Stop",
    "ToolCall",
    "ToolRequest",
    "Usage",
    "UsageData",
    "data_failed",
    "data_with_derived",
]


def __getattr__(name: str) -> Any:
    if name not in _MODELS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}._run"), name)
    globals()[name] = value
    return value
