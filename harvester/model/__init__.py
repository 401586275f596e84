"""The normalized Run: what every agent invocation becomes, in production and in replay.

Two forms, one owner: the pydantic ``Run`` (``_run``), which checks and cases read, and its
plain-dict form ``RunData`` (``_data``), which capture, ingest and the store hand each other; the
only conversions are ``Run.to_data()`` and ``Run.from_data()``. The models load on first use, so
the production hook, which only handles ``RunData``, imports no pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy
from ._data import (
    NOT_RUN,
    STOPS,
    CallData,
    CallStatus,
    ErrorData,
    LlmCallData,
    McpToolData,
    MessageData,
    ModelAnswerData,
    ModelRequestData,
    RequestData,
    RunData,
    Stop,
    ToolSpecData,
    UsageData,
    data_failed,
)

if TYPE_CHECKING:
    from ._run import (
        ErrorInfo,
        LlmCall,
        McpTool,
        Message,
        ModelAnswer,
        ModelRequest,
        Run,
        ToolCall,
        ToolRequest,
        ToolSpec,
        Usage,
    )

_MODELS = (
    "ErrorInfo",
    "LlmCall",
    "McpTool",
    "Message",
    "ModelAnswer",
    "ModelRequest",
    "Run",
    "ToolCall",
    "ToolRequest",
    "ToolSpec",
    "Usage",
)

__all__ = [
    "NOT_RUN",
    "STOPS",
    "CallData",
    "CallStatus",
    "ErrorData",
    "ErrorInfo",
    "LlmCall",
    "LlmCallData",
    "McpTool",
    "McpToolData",
    "Message",
    "MessageData",
    "ModelAnswer",
    "ModelAnswerData",
    "ModelRequest",
    "ModelRequestData",
    "RequestData",
    "Run",
    "RunData",
    "Stop",
    "ToolSpec",
    "ToolSpecData",
    "ToolCall",
    "ToolRequest",
    "Usage",
    "UsageData",
    "data_failed",
]


__getattr__ = lazy(__name__, dict.fromkeys(_MODELS, "_run"), globals())
