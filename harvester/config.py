"""Project configuration: ``[tool.harvester]`` in ``pyproject.toml`` or a ``harvester.toml``.

Low in the module list on purpose: the capture hook reads the redaction rules from here, so this
module imports only ``errors`` and ``_files`` (plus stdlib and pydantic) and never the model or the CLI.

Discovery walks up from the working directory and stops at the first folder holding a
``harvester.toml`` (top-level keys) or a ``pyproject.toml`` (its ``[tool.harvester]`` table; a
pyproject without one marks the project root and yields the defaults), so a parent folder's
settings never leak into an unrelated project. Relative ``cases_dir`` / ``store`` paths are
resolved against the folder of the file that set them, so commands behave the same from any
sub-folder. A config file that cannot be read or decoded (not UTF-8, not TOML, not a regular file)
is one ``ConfigError`` naming it.

TOML: ``tomllib`` on Python >= 3.11; on 3.10 ``tomli`` when it is installed, otherwise a clear
``ConfigError`` asking for it (no home-grown TOML parser to drift from the spec).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ._files import MAX_READ_BYTES, read_file
from .errors import ConfigError, pydantic_field

__all__ = [
    "MODEL_MODES",
    "Config",
    "Calibration",
    "ImportPolicy",
    "JudgeConfig",
    "ModelMode",
    "Price",
    "RedactRules",
    "ReplayPolicy",
    "SandboxPolicy",
    "SuiteMix",
    "find_config",
    "host_problem",
    "load_config",
]

try:  # pragma: no cover - which branch runs depends on the interpreter
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef,import-not-found,unused-ignore]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment,unused-ignore]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(_Strict):
    """USD per 1,000 tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class RedactRules(_Strict):
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


# A host name (labels of letters, digits and hyphens; a leading "*." matches any subdomain), an IPv4
# address, or an IPv6 address in brackets; then an optional ":port".
_HOST = re.compile(
    r"(?:(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?"
)


def host_problem(host: str) -> str | None:
    """Why ``host`` is not an ``allow_hosts`` entry, or None when it is one."""
    if host.startswith("unix:/") and len(host) > 6 and "\x00" not in host:
        return None
    match = _HOST.fullmatch(host)
    if match is None or (match.group(1) is not None and not 0 < int(match.group(1)) < 65536):
        return f"{host!r} is not a host or host:port (api.example.com, 10.0.0.5:8080, unix:/path)"
    return None


def _filled(entries: list[str], what: str) -> list[str]:
    for i, entry in enumerate(entries):
        if not entry.strip():
            raise ValueError(f"entry {i} is empty: {what}")
    return entries


def _valid_hosts(hosts: list[str]) -> list[str]:
    for i, host in enumerate(hosts):
        problem = host_problem(host)
        if problem is not None:
            raise ValueError(f"entry {i} {problem}")
    return hosts


# How a replay serves the agent's model calls (docs/replay.md, "The recorded model"): ``live`` calls the
# model; ``recorded`` answers each call from the case's model fixtures and fails the case where the
# request drifted; ``recorded-then-live`` continues a drifted case on the live model.
ModelMode = Literal["live", "recorded", "recorded-then-live"]
MODEL_MODES: tuple[str, ...] = get_args(ModelMode)


class ReplayPolicy(_Strict):
    """``[tool.harvester.replay]``: what a replay may reach beyond its fixtures, and its release floor."""

    # Hosts a replayed agent may connect to besides its recording's model hosts ("host" or "host:port").
    allow_hosts: list[str] = Field(default_factory=list)
    # Commands a replayed agent may start (an MCP server: "npx", "python -m my_server"): the words of an
    # entry must begin the command line; a first word without "/" matches the program's base name.
    allow_commands: list[str] = Field(default_factory=list)
    # The release gate's absolute floor: a suite below this pass rate never passes, baseline or not.
    min_task_completion: float = Field(0.5, ge=0, le=1)
    # How the agent's model calls are served: "live", "recorded" or "recorded-then-live" (--model).
    model: ModelMode = "live"

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        return _valid_hosts(hosts)

    @field_validator("allow_commands")
    @classmethod
    def _commands(cls, commands: list[str]) -> list[str]:
        return _filled(commands, "name the command a replay may start (npx, uvx, ...)")


class SandboxPolicy(_Strict):
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
        return _valid_hosts(hosts)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ImportPolicy(_Strict):
    """``[tool.harvester.import]``: how long a pull from a backend (``import``, ``--from``) may take and
    how much it may read, so a backend that pages forever or answers huge ends it (docs/backends)."""

    # Seconds the whole pull may take, every request within it (--deadline overrides).
    deadline: float = Field(600.0, gt=0)
    # Pages per trace and per listing: a cursor past this many is a backend that never ends.
    max_pages: int = Field(1000, ge=1)
    # One answer's size in MiB; it bounds the JSON values parsed too (one per 32 bytes).
    max_answer_mib: int = Field(64, ge=1)


class JudgeConfig(_Strict):
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


class Calibration(_Strict):
    """``[tool.harvester.calibration]``: when a judge's agreement with human labels makes it trusted."""

    min_kappa: float = Field(0.6, ge=-1, le=1)
    min_labels: int = Field(30, ge=1)
    require: bool = False  # refuse to replay cases gated on an uncalibrated judge (default: a warning)
    # Where ``judge calibrate`` keeps its results, relative to the config: commit it for the nightly job.
    file: str = "judges.calibration.json"


class SuiteMix(_Strict):
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


class Config(_Strict):
    # Tools with side effects (names or glob patterns): forbidden in a case unless the run needed them.
    mutating_tools: list[str] = Field(default_factory=list)
    # Argument paths that vary between identical calls (request ids, timestamps): left out of fixture keys.
    ignore_args: dict[str, list[str]] = Field(default_factory=dict)
    # Model name (exact, or the longest matching prefix) -> price per 1k tokens.
    prices: dict[str, Price] = Field(default_factory=dict)
    redact: RedactRules = Field(default_factory=RedactRules)
    # What a replay may reach outside its fixtures (the seal) and the release gate's floor.
    replay: ReplayPolicy = Field(default_factory=ReplayPolicy)
    # How long a pull from a backend may take and how much it may read (``import`` is a keyword).
    imports: ImportPolicy = Field(default_factory=ImportPolicy, alias="import")
    # The tools ``replay --sandbox`` runs for real, and where (docs/replay.md, "Sandbox").
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    # Judges a case may name (``judges = [...]``), and the one a case with ``expected`` gets by default.
    judges: dict[str, JudgeConfig] = Field(default_factory=dict)
    default_judge: str | None = None
    calibration: Calibration = Field(default_factory=Calibration)

    # The suite's mix by kind (``harvester suite stats``).
    suite: SuiteMix = Field(default_factory=SuiteMix)
    # Release gates, e.g. "task_completion>=0.85"; parsed by the report module.
    gates: list[str] = Field(default_factory=list)
    cases_dir: str = "cases"
    store: str | None = None
    # Modules imported before any case loads: where custom checks register (``@checks.register``).
    # Importing runs their code, on every command that reads this config (as pytest does conftest.py).
    plugins: list[str] = Field(default_factory=list)
    # The largest case file (or suite.json) the case commands read, in bytes: a bigger one is refused,
    # not read into memory.
    max_file_bytes: int = Field(MAX_READ_BYTES, ge=1)
    # The file this came from (None for defaults); not a key users write.
    _source: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        return self._source

    def import_plugins(self) -> None:
        """Import ``plugins`` (cwd first on the path, as for ``--agent``); a failure names the module."""
        import importlib
        import os
        import sys

        if self.plugins and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        for name in self.plugins:
            try:
                importlib.import_module(name)
            except Exception as exc:
                raise ConfigError(
                    f"plugin {name!r} failed to import ({type(exc).__name__}: {exc})", file=self.source, field="plugins"
                ) from None

    def is_mutating(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.mutating_tools)

    def price_for(self, model: str | None) -> Price | None:
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        prefixes = [name for name in self.prices if model.startswith(name)]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def cost(self, model: str | None, usage: Any) -> float | None:
        """USD for ``usage`` (a ``Usage`` or a mapping of token counts); None when the model has no price
        or no token count is known (unknown tokens are not zero tokens)."""
        price = self.price_for(model)
        tokens = _tokens(usage) if usage is not None else None
        if price is None or tokens is None:
            return None
        return (tokens[0] * price.input + tokens[1] * price.output) / 1000.0


def _tokens(usage: Any) -> tuple[int, int] | None:
    if isinstance(usage, Mapping):
        tin, tout = usage.get("input_tokens"), usage.get("output_tokens")
    else:
        tin, tout = getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None)
    if tin is None or tout is None:
        return None  # half a count under-prices the run: the cost is unknown
    return int(tin), int(tout)


def find_config(start: str | Path | None = None) -> tuple[Path | None, dict[str, Any]]:
    """The nearest config file from ``start`` upward and its harvester table (empty when none)."""
    folder = Path(start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        own = candidate / "harvester.toml"
        if own.is_file():
            return own, _read_toml(own)
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            return pyproject, _harvester_table(pyproject)
    return None, {}


def load_config(path: str | Path | None = None, start: str | Path | None = None) -> Config:
    """The configuration at ``path`` (``--config``), else the nearest one from ``start`` (the cwd) upward."""
    if path is not None:
        file = Path(path)
        if not file.exists():  # anything else there is read, or refused, by ``read_file``
            raise ConfigError("config file not found", file=str(file))
        table = _harvester_table(file) if file.name == "pyproject.toml" else _read_toml(file)
    else:
        found, table = find_config(start)
        if found is None:
            return Config()
        file = found
    return _validate(table, file)


def _validate(table: dict[str, Any], file: Path) -> Config:
    prefix = "tool.harvester" if file.name == "pyproject.toml" else ""
    try:
        config = Config.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        field = ".".join(p for p in (prefix, loc) if p) or "(root)"
        if err.get("type") == "extra_forbidden":
            raise ConfigError(f"unknown key {loc.rsplit('.', 1)[-1]!r}", file=str(file), field=field) from None
        raise ConfigError(pydantic_field(exc)[1], file=str(file), field=field) from None
    base = file.parent.resolve()
    config._source = str(file)
    for judge in config.judges.values():  # a rubric file, like every path here, is relative to the file
        judge.rubric_file = str(base / judge.rubric_file) if judge.rubric_file else None
    config.calibration.file = str(base / config.calibration.file)
    if config.default_judge is not None and config.default_judge not in config.judges:
        field = ".".join(p for p in (prefix, "default_judge") if p)
        raise ConfigError(f"{config.default_judge!r} is not a judge defined under judges", file=str(file), field=field)
    config.cases_dir = str(base / config.cases_dir)
    if config.store:
        config.store = _store_beside(config.store, base)
    return config


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)


def _store_beside(store: str, base: Path) -> str:
    """A relative store path is relative to the config file. A URL is kept as written: joined to the
    folder it became a file path that escaped the store's URL check, with any password in its name."""
    url = _URL.fullmatch(store)
    if url is None:
        return str(base / store)
    scheme, rest = url.groups()
    if scheme.lower() == "sqlite" and rest.startswith("/") and not rest.startswith("//"):
        return f"sqlite:///{base / rest[1:]}"  # sqlite:///relative.db, relative to the config too
    return store


def _read_toml(file: Path) -> dict[str, Any]:
    if _toml is None:  # pragma: no cover - Python 3.10 without tomli
        raise ConfigError("reading TOML on Python 3.10 needs the 'tomli' package (pip install tomli)", file=str(file))
    raw = read_file(file, error=ConfigError)
    try:
        return _toml.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start}); TOML is UTF-8", file=str(file)
        ) from None
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML ({exc})", file=str(file)) from None


def _harvester_table(pyproject: Path) -> dict[str, Any]:
    table = _read_toml(pyproject).get("tool", {}).get("harvester", {})
    if not isinstance(table, dict):
        raise ConfigError("must be a table", file=str(pyproject), field="tool.harvester")
    return table
