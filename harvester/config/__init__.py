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
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError

from .._files import MAX_READ_BYTES, read_file
from ..errors import ConfigError, pydantic_field
from ._tables import (
    MODEL_MODES,
    Calibration,
    ImportPolicy,
    JudgeConfig,
    ModelMode,
    Price,
    RedactRules,
    ReplayPolicy,
    SandboxPolicy,
    Strict,
    SuiteMix,
    command_problem,
    entries_problem,
    host_entry,
    host_problem,
)

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
    "command_problem",
    "entries_problem",
    "find_config",
    "host_entry",
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


class Config(Strict):
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

    def field(self, key: str) -> str:
        """``key`` as a bad-input line names it in the file it came from: ``tool.harvester.KEY`` in a
        ``pyproject.toml``, ``KEY`` in a ``harvester.toml``."""
        return _field(Path(self._source) if self._source else None, key)

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
    try:
        config = Config.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        field = _field(file, loc).rstrip(".") or "(root)"
        if err.get("type") == "extra_forbidden":
            raise ConfigError(f"unknown key {loc.rsplit('.', 1)[-1]!r}", file=str(file), field=field) from None
        raise ConfigError(pydantic_field(exc)[1], file=str(file), field=field) from None
    base = file.parent.resolve()
    config._source = str(file)
    for judge in config.judges.values():  # a rubric file, like every path here, is relative to the file
        judge.rubric_file = str(base / judge.rubric_file) if judge.rubric_file else None
    config.calibration.file = str(base / config.calibration.file)
    if config.default_judge is not None and config.default_judge not in config.judges:
        field = _field(file, "default_judge")
        raise ConfigError(f"{config.default_judge!r} is not a judge defined under judges", file=str(file), field=field)
    config.cases_dir = str(base / config.cases_dir)
    if config.store:
        config.store = _store_beside(config.store, base)
    return config


def _field(file: Path | None, key: str) -> str:
    return f"tool.harvester.{key}" if file is not None and file.name == "pyproject.toml" else key


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
