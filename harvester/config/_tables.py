"""The tables of ``[tool.harvester]`` (prices, redaction, replay, sandbox, import, judges, calibration,
suite mix): each a strict pydantic model whose validators turn a bad entry into one line naming its field.

Apart from ``Config`` and the file discovery in ``harvester.config`` so that each stays one short concept:
a new table is a class here and one field on ``Config``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import shlex
import unicodedata
from collections.abc import Callable, Sequence
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "MODEL_MODES",
    "Calibration",
    "ImportPolicy",
    "JudgeConfig",
    "ModelMode",
    "Price",
    "RedactRules",
    "ReplayPolicy",
    "SandboxPolicy",
    "Strict",
    "SuiteMix",
    "command_problem",
    "entries_problem",
    "host_entry",
    "host_problem",
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(Strict):
    """USD per 1,000 tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class RedactRules(Strict):
    enabled: bool = True
    # Regexes whose matches become deterministic pseudonyms anywhere in payloads: a list, or
    # {kind: regex} so the pseudonym names what it hides (<account_3f9a...>).
    patterns: list[str] | dict[str, str] = Field(default_factory=list)
    # Per-tool paths replaced whole, starting with args. or result.: {"get_customer": ["result.email"]}.
    fields: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str] | dict[str, str]) -> list[str] | dict[str, str]:
        named = patterns.items() if isinstance(patterns, dict) else enumerate(patterns)
        for name, pattern in named:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"patterns[{name!r}] {pattern!r} is not a valid regex ({exc})") from None
        return patterns

    @field_validator("fields")
    @classmethod
    def _rooted(cls, fields: dict[str, list[str]]) -> dict[str, list[str]]:
        for tool, paths in fields.items():
            for path in paths:
                if path.split(".", 1)[0] not in ("args", "result") or "." not in path:
                    raise ValueError(f"path {path!r} of tool {tool!r} must start with args. or result.")
        return fields


# A host name (labels of letters, digits, hyphens and underscores, which container service names use; a
# leading "*." matches any subdomain), an IPv4 address, or an IPv6 address in brackets (a zone after "%"
# as a bare one may have it); then an optional ":port". A bare IPv6 address (no port) is told by ``ipaddress``.
_HOST = re.compile(
    r"((?:\*\.)?[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
    r"|\[([0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?)\])(?::(\d{1,5}))?"
)
_NOT_HOST = "is not a host or host:port (api.example.com, 10.0.0.5:8080, ::1, [::1]:443, unix:/path)"


def host_entry(host: str) -> str:
    """``host`` as the seal compares it: an international name in its IDNA (punycode) form, as a client
    looks it up (``hóst.example.com`` -> ``xn--hst-0na.example.com``); anything else as written."""
    if host.isascii() or host.startswith(("unix:", "[")) or host.count(":") > 1:
        return host
    name, sep, port = host.rpartition(":") if ":" in host else (host, "", "")
    try:
        return name.encode("idna").decode("ascii") + sep + port
    except UnicodeError:  # an empty or over-long label: host_problem says why
        return host


def host_problem(host: str) -> str | None:
    """Why ``host`` is not an ``allow_hosts`` entry, or None when it is one (an international name is
    one: read as ``host_entry`` gives it)."""
    if host.startswith("unix:/") and len(host) > 6 and "\x00" not in host:
        return None
    if host.count(":") > 1 and not host.startswith("["):
        with contextlib.suppress(ValueError):
            ipaddress.IPv6Address(host)  # ::1 (its port, if any, goes in brackets: [::1]:443)
            return None
    match = _HOST.fullmatch(host_entry(host))
    if match is not None and match.group(2) is not None:  # brackets hold an IPv6 address, nothing else
        try:
            ipaddress.IPv6Address(match.group(2))
        except ValueError:
            match = None
    if match is None or (match.group(3) is not None and not 0 < int(match.group(3)) < 65536):
        return f"{host!r} {_NOT_HOST}"
    if match.group(2) is None:
        return _name_problem(host, match.group(1).rstrip("."))
    return None


def _name_problem(host: str, name: str) -> str | None:
    """Why a name the pattern admits is still no host: over 253 characters, or a last label of digits
    (no top-level domain is numeric, so ``1234``, ``1.2.3`` and ``1.2.3.400`` are addresses, and bad ones)."""
    if len(name) > 253:
        return f"{host!r} is not a host: a name is at most 253 characters"
    if name.rpartition(".")[2].isdigit():
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return f"{host!r} is not a host: a name ending in a number must be an IPv4 address (a.b.c.d, each 0-255)"
    return None


def command_problem(command: str) -> str | None:
    """Why ``command`` is not an ``allow_commands`` entry, or None when it is one: the seal splits it
    into words the way a shell would (``shlex``), and the first must name a program. No command line
    holds a control character (a NUL ends it for the kernel, so it would name another command)."""
    control = next((c for c in command if unicodedata.category(c) == "Cc"), None)
    if control is not None and command.strip():
        return f"{command!r} holds a control character (U+{ord(control):04X})"
    try:
        words = shlex.split(command)
    except ValueError as exc:  # an unbalanced quote
        return f"{command!r} does not split into words ({exc})"
    if not words or not words[0]:
        return f"{command!r} names no command (npx, uvx, python -m my_server, ...)"
    return None


def entries_problem(entries: Sequence[object], problem: Callable[[str], str | None]) -> str | None:
    """Why ``entries`` is not a list of what ``problem`` accepts (``entry I ...``, the first bad one), or
    None: the config's fields and the library's arguments (``replay(allow_hosts=...)``) say it alike."""
    for i, entry in enumerate(entries):
        why = problem(entry) if isinstance(entry, str) else f"{entry!r} is not a string"
        if why is not None:
            return f"entry {i} {why}"
    return None


def _filled(entries: list[str], what: str) -> list[str]:
    for i, entry in enumerate(entries):
        if not entry.strip():
            raise ValueError(f"entry {i} is empty: {what}")
    return entries


def _valid(entries: list[str], problem: Callable[[str], str | None]) -> list[str]:
    why = entries_problem(entries, problem)
    if why is not None:
        raise ValueError(why)
    return entries


# How a replay serves the agent's model calls (docs/replay.md, "The recorded model"): ``live`` calls the
# model; ``recorded`` answers each call from the case's model fixtures and fails the case where the
# request drifted; ``recorded-then-live`` continues a drifted case on the live model.
ModelMode = Literal["live", "recorded", "recorded-then-live"]
MODEL_MODES: tuple[str, ...] = get_args(ModelMode)


class ReplayPolicy(Strict):
    """``[tool.harvester.replay]``: what a replay may reach beyond its fixtures, and its release floor."""

    # Hosts a replayed agent may connect to besides its recording's model hosts ("host" or "host:port").
    allow_hosts: list[str] = Field(default_factory=list)
    # Commands a replayed agent may start (an MCP server: "npx", "python -m my_server"): the words of an
    # entry must begin the command line; a first word without "/" matches the program's base name.
    allow_commands: list[str] = Field(default_factory=list)
    # The release gate's absolute floor: a suite below this pass rate never passes, baseline or not.
    min_task_completion: float = Field(0.5, ge=0, le=1, strict=True)
    # How the agent's model calls are served: "live", "recorded" or "recorded-then-live" (--model).
    model: ModelMode = "live"

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        return [host_entry(host) for host in _valid(hosts, host_problem)]

    @field_validator("allow_commands")
    @classmethod
    def _commands(cls, commands: list[str]) -> list[str]:
        return _valid(commands, command_problem)


class SandboxPolicy(Strict):
    """``[tool.harvester.sandbox]``: the tools ``replay --sandbox`` runs for real (every other tool stays
    recorded), the environment that points them at the sandbox, and the hosts the seal then allows."""

    # Tool names or globs; a glob never matches a mutating tool (mutating_tools, a case's forbidden_tools):
    # such a tool runs for real only when named here in full.
    tools: list[str] = Field(default_factory=list)
    # Environment variables set while a sandboxed replay runs ({"ORDERS_URL": "http://127.0.0.1:8081"}).
    env: dict[str, str] = Field(default_factory=dict)
    # Hosts the sealed replay may connect to besides its usual ones ("host" or "host:port").
    hosts: list[str] = Field(default_factory=list)

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[str]) -> list[str]:
        return _filled(tools, "name a tool (get_order) or a glob (kb_*)")

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
        return env

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        return [host_entry(host) for host in _valid(hosts, host_problem)]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ImportPolicy(Strict):
    """``[tool.harvester.import]``: how long a pull from a backend (``import``, ``--from``) may take and
    how much it may read, so a backend that pages forever or answers huge ends it (docs/backends)."""

    # Seconds the whole pull may take, every request within it (--deadline overrides).
    deadline: float = Field(600.0, gt=0)
    # Pages per trace and per listing: a cursor past this many is a backend that never ends.
    max_pages: int = Field(1000, ge=1)
    # One answer's size in MiB; it bounds the JSON values parsed too (one per 32 bytes).
    max_answer_mib: int = Field(64, ge=1)


class JudgeConfig(Strict):
    """``[tool.harvester.judges.NAME]``: a function judge or a model judge (docs/judges.md). A command that
    uses it builds it (imports the function, asks pydantic-ai for the model): a config read imports nothing."""

    function: str | None = None
    model: str | None = None
    # With a base URL as ``model``: the model's name at that server, and the variable holding its key.
    model_name: str | None = None
    api_key_env: str | None = None
    rubric: str | None = None
    rubric_file: str | None = None  # relative to the config file
    # What a model judge is asked (docs/judges.md): is the answer ``equivalent`` to the case's
    # ``expected``, ``grounded`` in its recorded tool results, or does it ``follows`` the rubric.
    question: Literal["equivalent", "grounded", "follows"] = "equivalent"
    # Seconds one verdict may take; a judge that takes longer fails its check, never the suite.
    timeout: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _one_kind(self) -> JudgeConfig:
        if (self.function is None) == (self.model is None):
            raise ValueError("give exactly one of function or model")
        if self.function is not None and (self.function.count(":") != 1 or not all(self.function.split(":"))):
            raise ValueError(f"function {self.function!r} is not module:callable")
        if self.rubric is not None and self.rubric_file is not None:
            raise ValueError("give rubric or rubric_file, not both")
        return self


class Calibration(Strict):
    """``[tool.harvester.calibration]``: when a judge's agreement with human labels makes it trusted."""

    min_kappa: float = Field(0.6, ge=-1, le=1)
    min_labels: int = Field(30, ge=1)
    require: bool = False  # refuse to replay cases gated on an uncalibrated judge (default: a warning)
    # Where ``judge calibrate`` keeps its results, relative to the config: commit it for the nightly job.
    file: str = "judges.calibration.json"


class SuiteMix(Strict):
    """``[tool.harvester.suite]``: how ``harvester suite stats`` sorts cases into kinds, and the mix it aims for.

    A case is the first kind (in ``kinds``' order) one of whose words is among its tags or is its
    failure kind; a case matching none is ``typical``. The default mix is the practice's: about 40%
    typical, 25% edge, 20% adversarial, 15% regression.
    """

    kinds: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "adversarial": ["adversarial", "security", "injection", "jailbreak", "unintended_action", "blocked_action"],
            "regression": ["regression", "incident", "exception", "tool_error", "loop", "budget_exceeded", "max_steps"],
            "edge": ["edge", "deferred", "abstained", "negative_feedback", "twin"],
            "typical": ["typical", "happy"],
        }
    )
    mix: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: {"typical": 0.40, "edge": 0.25, "adversarial": 0.20, "regression": 0.15}
    )
    # A kind whose share is below this fraction of its share of the mix is warned about.
    far_below: float = Field(0.5, ge=0, le=1)
