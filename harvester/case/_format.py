"""The case file format, ``harvester.case/1``: the reviewable JSON a harvest writes and a replay reads.

A case file is plain JSON, never executed. ``AgentCase.to_case()`` compiles it into the runnable form
the replay runner uses, with the automatic checks first (mechanical, then structural) and the
case's own checks after. The JSON Schema of this model ships as ``harvester/case.schema.json``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import checks as checklib
from .._files import write_file
from ..config import entries_problem, host_problem
from ..model import ErrorInfo, McpTool, Message, ModelAnswer, ModelRequest
from ._case import Case

__all__ = [
    "NOTE_PREFIX",
    "SCHEMA",
    "SCHEMA_FILE",
    "AgentCase",
    "Fixture",
    "InjectSpec",
    "Label",
    "ModelTurn",
    "OrderRule",
    "Recorded",
    "Source",
    "Status",
    "case_json_schema",
    "check_id",
    "write_case_schema",
]

SCHEMA: Literal["harvester.case/1"] = "harvester.case/1"
NOTE_PREFIX = "note: "  # a review note that informs, and does not stop ``accept``
Status = Literal["pending", "accepted", "rejected"]
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_id(value: str) -> str:
    """``value`` if it is a case id, else ``ValueError``. An id names its file, so one from a command
    line is checked like one in a file before any path is built from it (``../x`` never leaves cases/)."""
    if not _ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a case id (letters, digits, '.', '_', '-'; it names the file)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fixture(_Strict):
    """One recorded tool call. ``key`` is ``tool:args_hash`` after the case's ``ignore_args``."""

    key: str
    tool: str
    args: Any = None
    result: Any = None
    error: ErrorInfo | None = None
    truncated: bool = False


class ModelTurn(_Strict):
    """One recorded model call (a model fixture): what it was asked and what it answered, in run order.

    A recorded-model replay serves ``answer`` for the agent's call at this step and compares the agent's
    request with ``request`` (None: not recorded, never compared). ``truncated``: a payload of the call was
    cut in the span, so the turn cannot be served as recorded."""

    request: ModelRequest | None = None
    answer: ModelAnswer
    streamed: bool = False
    truncated: bool = False


class Recorded(_Strict):
    trajectory: list[str] = Field(default_factory=list)
    # Tools the model asked for that never executed (a guardrail or a human denied them).
    denied: list[str] = Field(default_factory=list)
    # Tools the run stopped on, waiting for a human (an approval, an external result): stop ``deferred``.
    awaiting: list[str] = Field(default_factory=list)
    stop: str = "unknown"
    answer: str | None = None
    steps: int = 0
    cost: float | None = None
    # The hosts its model calls reached ("host" or "host:port"): the seal lets a replay reach these.
    model_hosts: list[str] = Field(default_factory=list)
    # The tools MCP servers offered the model: a replay lists a server's tools from here, never starting it.
    mcp_tools: list[McpTool] = Field(default_factory=list)
    # The SDK client instrumentation that traced the recording's model calls, by scope (OpenInference's or
    # OpenLLMetry's OpenAI / Anthropic instrumentor): replay turns it on when nothing traces the client.
    instrumentation: list[str] = Field(default_factory=list)

    @field_validator("model_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        why = entries_problem(hosts, _recorded_host_problem)
        if why is not None:
            raise ValueError(why)
        return hosts


def _recorded_host_problem(host: str) -> str | None:
    """An entry as ``allow_hosts`` says one (the seal reads both alike), where a provider's documented
    host may hold ``*`` anywhere (``bedrock-runtime.*.amazonaws.com``, ``*-aiplatform.googleapis.com``),
    but never a whole label so that it matches every host of a domain like ``com`` (``*``, ``*.com``)."""
    labels = host.split(":")[0].split(".") if not host.startswith("[") else []
    starred = [i for i, label in enumerate(labels) if label == "*"]
    if starred and len(labels) - starred[-1] - 1 < 2:
        return f"{host!r} matches too much: a * must come before a domain (*.example.com)"
    return host_problem(host.replace("*", "w"))


class Source(_Strict):
    trace_id: str | None = None
    run_id: str | None = None  # the run of the trace this case was made from
    captured_at: str | None = None
    agent: str | None = None
    failure_kind: str | None = None
    seen: int = Field(1, ge=1)
    # Start time of the newest run counted in ``seen``: a later harvest counts only runs after it.
    last_seen: str | None = None
    # ``harvest.signature()`` of the run(s): how a re-harvest finds this case instead of adding a twin.
    signature: str | None = None
    # Made by ``harvester incident`` (someone reported the run): a harvested run like it is its twin.
    incident: bool = False
    # Signatures the case had before ``harvester rerecord`` gave it a new recording: runs of the old
    # path are still this case's, so a re-harvest does not propose them again as new cases.
    earlier_signatures: list[str] = Field(default_factory=list)
    # The failure cluster (``harvester triage``) this case was proposed for by ``harvest --by-cluster``:
    # the cluster stays covered, however its runs' prompts vary. Absent from the file when None.
    cluster: str | None = None


class InjectSpec(_Strict):
    """A failure to inject into one tool: on every call, or on the first ``times`` calls."""

    mode: Literal["timeout", "not_found", "rate_limit", "permission", "empty", "malformed", "huge"]
    times: int | None = None


class OrderRule(_Strict):
    """``call`` must come after each of ``after`` (by default: the calls recorded before a mutating one).
    A reviewer relaxes it by removing names from ``after``; an empty ``after`` keeps the rule, relaxed."""

    call: str = Field(min_length=1)
    after: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)

    def summary(self) -> str:
        """``issue_refund after kb_search, get_order`` (``-`` for an empty ``after``)."""
        return checklib.order_text(self.call, self.after)


class Label(_Strict):
    """A reviewer's verdict on one answer to the case's prompt: the ground truth a judge is calibrated
    against (``harvester judge calibrate``). ``trace_id`` names the stored run it came from, if any."""

    answer: str
    verdict: Literal["good", "bad"]
    reason: str = ""
    trace_id: str | None = None
    by: str | None = None
    at: str | None = None


class AgentCase(_Strict):
    schema_: Literal["harvester.case/1"] = Field(SCHEMA, alias="schema")
    id: str
    status: Status = "pending"
    why: str = ""
    prompt: str
    # The conversation before this turn (a later turn of a chat): replay hands it to the agent with the
    # prompt. Its tool calls are context, never re-executed.
    history: list[Message] = Field(default_factory=list)
    expected: str | None = None
    required_elements: list[str] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)
    # The judges (``[tool.harvester.judges.NAME]``) that decide what the checks cannot; they run last,
    # only when every other check passed.
    judges: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    # Reviewers' good/bad verdicts on answers to this prompt (``review``, ``harvester label``).
    labels: list[Label] = Field(default_factory=list)
    min_steps: int | None = Field(None, ge=0)
    appropriate_tools: list[str] = Field(default_factory=list)
    forbidden_tools: list[str] = Field(default_factory=list)
    # The order a replay keeps around mutating calls: each rule's call only after its ``after`` calls.
    order: list[OrderRule] = Field(default_factory=list)
    max_cost: float | None = Field(None, ge=0)
    tags: list[str] = Field(default_factory=list)
    inject_failures: dict[str, InjectSpec] = Field(default_factory=dict)
    ignore_args: dict[str, list[str]] = Field(default_factory=dict)
    # A repeat of a call beyond the times the recording made it gets ``no_fixture`` (``already_played``)
    # rather than its last recording again: for every tool (true), or the tools listed. Harvest lists the
    # mutating tools the recording called: a refund issued twice is a second refund, not a redundant call.
    strict_repeats: bool | list[Annotated[str, Field(min_length=1)]] = False
    # Fail the case when the replay leaves a recorded call unmade (its report lists them either way).
    strict_consumption: bool = False
    fixtures: list[Fixture] = Field(default_factory=list)
    # The model's calls, one turn per call in order ([]: none recorded, e.g. content capture off, or a
    # case harvested before model fixtures): ``replay --model recorded`` answers the agent's calls from them.
    model_fixtures: list[ModelTurn] = Field(default_factory=list)
    # Reasons a reviewer must look before accepting. Each one says the case is broken (a result truncated,
    # payloads or the prompt not captured) and stops ``accept`` until fixed and deleted, or ``--force``;
    # one that starts with "note: " only informs (a twin of an incident).
    review_notes: list[str] = Field(default_factory=list)
    # Set by ``harvester reject``: why the case was turned down (the file stays, so it is not re-proposed).
    rejected_why: str | None = None
    recorded: Recorded = Field(default_factory=Recorded)
    source: Source = Field(default_factory=Source)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("id")
    @classmethod
    def _file_safe(cls, value: str) -> str:
        return check_id(value)

    def blocking_notes(self) -> list[str]:
        """The review notes that say this case is broken: ``accept`` refuses it while any is left."""
        return [n for n in self.review_notes if not n.startswith(NOTE_PREFIX)]

    def auto_checks(self) -> list[checklib.Check]:
        """The checks a case's fields imply, cheapest first: forbidden tools, order, cost, required elements,
        steps."""
        out: list[checklib.Check] = []
        if self.forbidden_tools:
            out.append(checklib.never_used(*self.forbidden_tools))
        out += [checklib.call_order(rule.call, rule.after) for rule in self.order]
        if self.max_cost is not None:
            out.append(checklib.max_cost(self.max_cost))
        if self.required_elements:
            out.append(checklib.contains(*self.required_elements))
        if self.min_steps:
            out.append(checklib.min_steps(self.min_steps, self.appropriate_tools))
            out.append(checklib.max_steps(3 * self.min_steps))
        return out

    def trajectory(self) -> dict[str, Any] | None:
        """The case's first ``trajectory_match`` spec (a harvested case has one), or None: for scripts."""
        return next((c for c in self.checks if c.get("check") == "trajectory_match"), None)

    def recording(self) -> checklib.Recording:
        """What the case recorded and forbids, as its harvested checks read it."""
        return checklib.Recording(self.fixtures, self.recorded.trajectory, self.forbidden_tools, self.ignore_args)

    def held(self, check: checklib.HarvestedCheck) -> list[dict[str, Any]]:
        """What a harvested check keeps in this case: its specs among the checks, or its field's entries."""
        return checklib.held(check, self.model_dump(include={checklib.CHECKS, check.slot}))

    def compiled_checks(self, file: str | None = None) -> list[checklib.Check]:
        recording = self.recording()
        declared = [
            checklib.from_spec(_compiled(spec, recording), where=_where(file, f"checks[{i}]"))
            for i, spec in enumerate(self.checks)
        ]
        auto = self.auto_checks()
        seen = {c.label() for c in auto}
        return auto + [c for c in declared if c.label() not in seen]

    def to_case(self, file: str | None = None) -> Case:
        return Case(
            id=self.id,
            task=self.prompt,
            checks=self.compiled_checks(file),
            tags=list(self.tags),
            why=self.why or "(no why recorded)",
            spec=self,
        )


def _where(file: str | None, field: str) -> str:
    return f"{file}: {field}" if file else field


def _compiled(spec: Any, recording: checklib.Recording) -> Any:
    """A declared spec as the case runs it: a harvested check's may read the case's fields."""
    name = spec.get("check") if isinstance(spec, dict) else None
    check = next((c for c in checklib.HARVESTED if c.name == name), None)
    return spec if check is None else check.compiled(spec, recording)


SCHEMA_FILE = Path(__file__).parent.parent / "case.schema.json"


def case_json_schema() -> dict[str, Any]:
    """JSON Schema of the case file, for editors and other tools (shipped as ``case.schema.json``)."""
    schema = AgentCase.model_json_schema(by_alias=True)
    schema["title"] = "harvester case file (harvester.case/1)"
    return schema


def write_case_schema(path: str | Path = SCHEMA_FILE) -> Path:
    """Regenerate the shipped schema after changing the model (a test fails until you do)."""
    return write_file(
        path, orjson.dumps(case_json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n", atomic=True
    )
