"""The normalized Run: what every agent invocation becomes, in production and in replay.

Checks read Runs, never spans, so a check behaves the same on a stored production trace and on a
replay. ``requested_tools`` and ``blocked_tools`` are derived from ``calls`` (a denied request is a
call with status ``blocked``) and appear in the JSON form for readers, but are never stored twice.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator

from .errors import RunFormatError, pydantic_field

Stop = Literal["answered", "error", "deferred", "budget_exceeded", "max_steps", "loop_detected", "unknown"]
STOPS: tuple[str, ...] = Stop.__args__  # type: ignore[attr-defined]
CallStatus = Literal["ok", "error", "blocked"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class ErrorInfo(_Model):
    type: str
    message: str = ""


class Usage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(input_tokens=self.input_tokens + other.input_tokens,
                     output_tokens=self.output_tokens + other.output_tokens)

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class ToolCall(_Model):
    """One tool call the model asked for. ``status`` says whether it executed (ok/error) or not (blocked).

    ``args``/``result`` are ``None`` when the payload was not captured (see ``Run.content_captured``).
    """

    name: str
    call_id: Optional[str] = None
    args: Any = None
    status: CallStatus = "ok"
    result: Any = None
    error: Optional[ErrorInfo] = None
    truncated: bool = False

    @property
    def executed(self) -> bool:
        return self.status != "blocked"


class ToolRequest(_Model):
    """A tool call as the model emitted it in its output (before anything ran)."""

    name: str
    call_id: Optional[str] = None
    args: Any = None


class LlmCall(_Model):
    model: Optional[str] = None
    usage: Usage = Field(default_factory=Usage)
    requests: list[ToolRequest] = Field(default_factory=list)
    finish_reason: Optional[str] = None


class Run(_Model):
    trace_id: str
    run_id: str = ""
    agent: Optional[str] = None
    model: Optional[str] = None
    prompt: Optional[str] = None
    answer: Optional[str] = None
    stop: Stop = "unknown"
    error: Optional[ErrorInfo] = None
    calls: list[ToolCall] = Field(default_factory=list)
    llm_calls: list[LlmCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost: Optional[float] = None
    started_at: Optional[str] = None
    duration_ms: Optional[float] = None
    # False when the producer hid payloads (content capture off): args, results, prompt or answer unknown.
    content_captured: bool = True
    # "negative" when the app or a user flagged the run (feedback attribute, incident command).
    feedback: Optional[str] = None
    source: Optional[str] = None  # the convention it was read with: genai, openinference, openllmetry, harvester

    # -- derived views -------------------------------------------------------------------------
    def trajectory(self) -> list[str]:
        """Names of the calls that executed successfully, in order."""
        return [c.name for c in self.calls if c.status == "ok"]

    def requested_tools(self) -> list[str]:
        """Every tool the model asked for, denied ones included (first-request order, no repeats)."""
        return list(dict.fromkeys(c.name for c in self.calls))

    def blocked_tools(self) -> list[str]:
        """Requested tools that were denied, invalid or failed."""
        return list(dict.fromkeys(c.name for c in self.calls if c.status != "ok"))

    def executed_tools(self) -> list[str]:
        """Names of calls that reached execution (ok or error), in order."""
        return [c.name for c in self.calls if c.status != "blocked"]

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
        data["requested_tools"] = self.requested_tools()
        data["blocked_tools"] = self.blocked_tools()
        return data

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("requested_tools" in data or "blocked_tools" in data):
            data = {k: v for k, v in data.items() if k not in ("requested_tools", "blocked_tools")}
        return data

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_json(cls, data: bytes | str | dict[str, Any], *, file: str | None = None) -> "Run":
        try:
            obj = orjson.loads(data) if isinstance(data, (bytes, str)) else data
            return cls.model_validate(obj)
        except orjson.JSONDecodeError as exc:
            raise RunFormatError(f"not JSON ({exc})", file=file) from None
        except ValidationError as exc:
            field, msg = pydantic_field(exc)
            raise RunFormatError(msg, file=file, field=field) from None


# -- the plain-dict form ---------------------------------------------------------------------------
# Capture and ingest handle a run as ``Run.model_dump(mode="json")`` would give it (without building
# the model: validation and serialization of the model cost more than reading the run). These two
# are the model's ``failed`` and derived lists over that form.
def data_failed(data: dict[str, Any]) -> bool:
    """``Run.failed`` of a run's plain-dict form."""
    return (data["stop"] != "answered" or any(c["status"] != "ok" for c in data["calls"])
            or data["feedback"] == "negative")


def data_with_derived(data: dict[str, Any]) -> dict[str, Any]:
    """A run's plain-dict form with ``requested_tools``/``blocked_tools``, as its JSON form has them."""
    calls = data["calls"]
    return {**data, "requested_tools": list(dict.fromkeys(c["name"] for c in calls)),
            "blocked_tools": list(dict.fromkeys(c["name"] for c in calls if c["status"] != "ok"))}
