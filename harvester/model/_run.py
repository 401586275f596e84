"""The normalized Run: what every agent invocation becomes, in production and in replay.

Checks read Runs, never spans, so a check behaves the same on a stored production trace and on a
replay. ``requested_tools`` and ``blocked_tools`` are derived from ``calls`` (a denied request is a
call with status ``blocked``) and appear in the JSON form for readers, but are never stored twice.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

from ..errors import RunFormatError, pydantic_field
from ._data import NOT_RUN, CallStatus, RunData, Stop

__all__ = [
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
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class ErrorInfo(_Model):
    type: str
    message: str = ""


class Usage(_Model):
    """Token counts; None when the spans did not say. Unknown is not zero: a cost read from it would lie."""

    input_tokens: int | None = None
    output_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=_plus(self.input_tokens, other.input_tokens),
            output_tokens=_plus(self.output_tokens, other.output_tokens),
        )

    @property
    def total(self) -> int | None:
        return _plus(self.input_tokens, self.output_tokens)

    def text(self) -> str:
        """``120+45`` with ``?`` for an unknown count."""
        return f"{_shown(self.input_tokens)}+{_shown(self.output_tokens)}"


def _plus(a: int | None, b: int | None) -> int | None:
    """Unknown plus anything is unknown: a partial sum would under-count."""
    return None if a is None or b is None else a + b


def _shown(n: int | None) -> str:
    return "?" if n is None else str(n)


class ToolCall(_Model):
    """One tool call the model asked for. ``status`` says whether it executed (ok/error) or not (blocked).

    ``args``/``result`` are ``None`` when the payload was not captured (see ``Run.content_captured``).
    """

    name: str
    call_id: str | None = None
    args: Any = None
    status: CallStatus = "ok"
    result: Any = None
    error: ErrorInfo | None = None
    truncated: bool = False

    @property
    def executed(self) -> bool:
        """It ran (ok or error); a denied or an awaiting request did not."""
        return self.status not in NOT_RUN


class ToolRequest(_Model):
    """A tool call as the model emitted it in its output (before anything ran)."""

    name: str
    call_id: str | None = None
    args: Any = None


class Message(_Model):
    """One message of the conversation before a turn: what the agent is handed again on replay.

    Earlier turns' tool calls are context (their results are in the tool messages), never re-executed.
    """

    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolRequest] = Field(default_factory=list)
    tool_call_id: str | None = None  # the call a tool message answers


class McpTool(_Model):
    """A tool an MCP server offered the model, as the recording saw it (pydantic-ai's chat spans list
    every tool offered, an MCP server's with its annotations and metadata). A replay lists an MCP
    server's tools from these, so the server need not start. ``name`` is the name the model saw (a
    prefixing toolset's prefix included); ``toolset`` the ``id`` the server's toolset was given."""

    name: str
    toolset: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None


class ToolSpec(_Model):
    """A tool the model was offered (``ToolSpecData``): name, description, JSON schema of its args."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # None: the recording does not say


class ModelRequest(_Model):
    """What one model call received (``ModelRequestData``): a recorded-model replay compares the
    agent's request with it. ``tools`` None: the recording does not say which were offered. ``model``:
    the model asked for (None: the recording does not say; cases harvested before it was kept)."""

    system: str | None = None
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None


class ModelAnswer(_Model):
    """What one model call answered (``ModelAnswerData``): served back in a recorded-model replay."""

    text: str | None = None
    tool_calls: list[ToolRequest] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None


class LlmCall(_Model):
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    requests: list[ToolRequest] = Field(default_factory=list)
    finish_reason: str | None = None
    # Where the model was reached: the span's endpoint ("host" or "host:port") and provider, when it says.
    # A replay's seal lets the agent reach these hosts (docs/seal.md).
    server: str | None = None
    provider: str | None = None
    # What it was asked (None: content capture was off, or the span does not say) and the text it
    # answered; whether it streamed the answer; whether a payload was cut (the attribute length limit).
    request: ModelRequest | None = None
    text: str | None = None
    streamed: bool = False
    truncated: bool = False

    def answer(self) -> ModelAnswer:
        """What it answered, as a recorded-model replay serves it."""
        return ModelAnswer(
            text=self.text,
            tool_calls=self.requests,
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )


class Run(_Model):
    trace_id: str
    run_id: str = ""
    agent: str | None = None
    model: str | None = None
    prompt: str | None = None
    answer: str | None = None
    stop: Stop = "unknown"
    error: ErrorInfo | None = None
    calls: list[ToolCall] = Field(default_factory=list)
    llm_calls: list[LlmCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    started_at: str | None = None
    duration_ms: float | None = None
    # False when the producer hid payloads (content capture off): args, results, prompt or answer unknown.
    content_captured: bool = True
    # "negative" when the app or a user flagged the run (feedback attribute, incident command).
    feedback: str | None = None
    source: str | None = None  # the convention it was read with: genai, openinference, openllmetry, harvester
    # The conversation before this turn, from the first model call's input: None when the spans do
    # not hold it, [] when this turn began the conversation.
    history: list[Message] | None = None
    # Every agent that ran in the run: its own first, then the agents it handed over to or managed. A
    # call of one of their names (or a handoff to one, ``transfer_to_<agent>``) was answered by running
    # that agent, not a tool body. [] when the spans name no agent.
    agents: list[str] = Field(default_factory=list)
    # The tools MCP servers offered the model: a replay lists a server's tools from them.
    mcp_tools: list[McpTool] = Field(default_factory=list)
    # The instrumentation scopes that traced its model calls (``openinference.instrumentation.openai``):
    # a replay of a raw SDK loop turns the same instrumentor on, so it reads the replay as production.
    instrumentation: list[str] = Field(default_factory=list)
    # Why the run may lack spans it produced: capture dropped a span of its trace (``queue_full``,
    # ``trace_too_big``, ...). None: stored whole. A case harvested from it carries a review note.
    incomplete: str | None = None

    # -- derived views -------------------------------------------------------------------------
    def trajectory(self) -> list[str]:
        """Names of the calls that executed successfully, in order."""
        return [c.name for c in self.calls if c.status == "ok"]

    def requested_tools(self) -> list[str]:
        """Every tool the model asked for, denied ones included (first-request order, no repeats)."""
        return list(dict.fromkeys(c.name for c in self.calls))

    def blocked_tools(self) -> list[str]:
        """Requested tools that were denied, invalid or failed (not those still awaiting a human)."""
        return list(dict.fromkeys(c.name for c in self.calls if c.status not in ("ok", "awaiting")))

    def awaiting_tools(self) -> list[str]:
        """Requested tools the run stopped on, waiting for a human (an approval, an external result)."""
        return list(dict.fromkeys(c.name for c in self.calls if c.status == "awaiting"))

    def executed_tools(self) -> list[str]:
        """Names of calls that reached execution (ok or error), in order."""
        return [c.name for c in self.calls if c.status not in NOT_RUN]

    @property
    def ok(self) -> bool:
        return self.stop == "answered"

    @property
    def steps(self) -> int:
        """Tool calls the model made (every status): the unit of ``min_steps`` and ``max_steps``."""
        return len(self.calls)

    @property
    def failed(self) -> bool:
        """A run worth keeping even when sampling drops successes."""
        return self.stop != "answered" or any(c.status != "ok" for c in self.calls) or self.feedback == "negative"

    # -- JSON ----------------------------------------------------------------------------------
    @model_serializer(mode="wrap")
    def _with_derived(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if not self.mcp_tools:  # most runs have none: their JSON stays as it was
            data.pop("mcp_tools", None)
        if self.incomplete is None:  # nor a mark on a whole run
            data.pop("incomplete", None)
        data["requested_tools"] = self.requested_tools()
        data["blocked_tools"] = self.blocked_tools()
        return data

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("requested_tools" in data or "blocked_tools" in data):
            data = {k: v for k, v in data.items() if k not in ("requested_tools", "blocked_tools")}
        return data

    def to_data(self) -> RunData:
        """The plain-dict form (``RunData``): the JSON form, derived lists included."""
        return cast(RunData, self.model_dump(mode="json"))

    @classmethod
    def from_data(cls, data: RunData) -> Run:
        """A Run from its plain-dict form (validated: a stored or redacted dict may be anything)."""
        return cls.model_validate(data)

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_json(cls, data: bytes | str | dict[str, Any], *, file: str | None = None) -> Run:
        try:
            obj = orjson.loads(data) if isinstance(data, (bytes, str)) else data
            return cls.model_validate(obj)
        except orjson.JSONDecodeError as exc:
            raise RunFormatError(f"not JSON ({exc})", file=file) from None
        except ValidationError as exc:
            field, msg = pydantic_field(exc)
            raise RunFormatError(msg, file=file, field=field) from None
