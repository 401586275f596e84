"""Cases: the in-code ``Case``, the reviewable case file ``AgentCase`` and the folder that holds them.

A case file is plain JSON, never executed; loading validates it and names the file and field in
every error. ``AgentCase.to_case()`` compiles it into the runnable form the replay runner uses,
with the automatic checks first (mechanical, then structural) and the case's own checks after.

Layout of a cases folder (``cases/`` by default, ``$HARVESTER_CASES`` or the config's ``cases_dir``)::

    cases/suite.json          the suite manifest (``suite``): name, version, content hash of the accepted cases
    cases/<id>.json           accepted cases: what the nightly replay runs
    cases/pending/<id>.json   harvested, waiting for review
    cases/rejected/<id>.json  reviewed and turned down; kept so a re-harvest does not propose them again

The file name is the case id, so ``harvester accept ID`` finds a case without reading the others.
The ``status`` field is authoritative (``load_cases(status=...)`` filters on it); ``CaseFolder.save``
keeps each file in the sub-folder its status names.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Optional, Sequence

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import checks as checklib
from ._files import write_file
from .canonical import fixture_key
from .errors import CaseFileError, CheckSpecError, NotFoundError, pydantic_field
from .model import ErrorInfo, Run

SCHEMA = "harvester.case/1"
Status = Literal["pending", "accepted", "rejected"]


@dataclass
class Case:
    """A runnable case. ``task`` is the prompt; ``checks`` are callables ``Run -> (bool, str)``.

    ``spec`` links back to the case file it was compiled from (fixtures, injected failures); an
    in-code case has none, so its tools run live unless the agent supplies its own.
    """

    id: str
    task: str
    checks: list[Callable[[Run], Any]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    why: str = ""
    spec: Optional["AgentCase"] = None

    def __post_init__(self) -> None:
        if not self.why.strip():
            warnings.warn(f"case {self.id!r} has no 'why': say what it protects against", stacklevel=3)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fixture(_Strict):
    """One recorded tool call. ``key`` is ``tool:args_hash`` after the case's ``ignore_args``."""

    key: str
    tool: str
    args: Any = None
    result: Any = None
    error: Optional[ErrorInfo] = None
    truncated: bool = False


class Recorded(_Strict):
    trajectory: list[str] = Field(default_factory=list)
    # Tools the model asked for that never executed (a guardrail or a human denied them).
    denied: list[str] = Field(default_factory=list)
    stop: str = "unknown"
    answer: Optional[str] = None
    steps: int = 0
    cost: Optional[float] = None


class Source(_Strict):
    trace_id: Optional[str] = None
    run_id: Optional[str] = None  # the run of the trace this case was made from
    captured_at: Optional[str] = None
    agent: Optional[str] = None
    failure_kind: Optional[str] = None
    seen: int = Field(1, ge=1)
    # Start time of the newest run counted in ``seen``: a later harvest counts only runs after it.
    last_seen: Optional[str] = None
    # ``harvest.signature()`` of the run(s): how a re-harvest finds this case instead of adding a twin.
    signature: Optional[str] = None


class InjectSpec(_Strict):
    """A failure to inject into one tool: on every call, or on the first ``times`` calls."""

    mode: Literal["timeout", "not_found", "rate_limit", "permission", "empty", "malformed", "huge"]
    times: Optional[int] = None


class AgentCase(_Strict):
    schema_: Literal["harvester.case/1"] = Field(SCHEMA, alias="schema")
    id: str
    status: Status = "pending"
    why: str = ""
    prompt: str
    expected: Optional[str] = None
    required_elements: list[str] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)
    min_steps: Optional[int] = Field(None, ge=0)
    appropriate_tools: list[str] = Field(default_factory=list)
    forbidden_tools: list[str] = Field(default_factory=list)
    max_cost: Optional[float] = Field(None, ge=0)
    tags: list[str] = Field(default_factory=list)
    inject_failures: dict[str, InjectSpec] = Field(default_factory=dict)
    ignore_args: dict[str, list[str]] = Field(default_factory=dict)
    strict_repeats: bool = False
    fixtures: list[Fixture] = Field(default_factory=list)
    # Reasons a reviewer must look before accepting (truncated results, hidden payloads, ...).
    review_notes: list[str] = Field(default_factory=list)
    # Set by ``harvester reject``: why the case was turned down (the file stays, so it is not re-proposed).
    rejected_why: Optional[str] = None
    recorded: Recorded = Field(default_factory=Recorded)
    source: Source = Field(default_factory=Source)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("id")
    @classmethod
    def _file_safe(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a case id (letters, digits, '.', '_', '-'; it names the file)")
        return value

    def auto_checks(self) -> list[checklib.Check]:
        """The checks a case's fields imply, cheapest first: forbidden tools, cost, required elements, steps."""
        out: list[checklib.Check] = []
        if self.forbidden_tools:
            out.append(checklib.never_used(*self.forbidden_tools))
        if self.max_cost is not None:
            out.append(checklib.max_cost(self.max_cost))
        if self.required_elements:
            out.append(checklib.contains(*self.required_elements))
        if self.min_steps:
            out.append(checklib.max_steps(3 * self.min_steps))
        return out

    def compiled_checks(self, file: str | None = None) -> list[checklib.Check]:
        declared = [checklib.from_spec(spec, where=_where(file, f"checks[{i}]")) for i, spec in enumerate(self.checks)]
        auto = self.auto_checks()
        seen = {c.label() for c in auto}
        return auto + [c for c in declared if c.label() not in seen]

    def to_case(self, file: str | None = None) -> Case:
        return Case(id=self.id, task=self.prompt, checks=self.compiled_checks(file), tags=list(self.tags),
                    why=self.why or "(no why recorded)", spec=self)


def _where(file: str | None, field: str) -> str:
    return f"{file}: {field}" if file else field


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CASES_ENV = "HARVESTER_CASES"
SUITE_FILE = "suite.json"
STATUS_FOLDERS: dict[str, str] = {"accepted": "", "pending": "pending", "rejected": "rejected"}


# -- one case file ----------------------------------------------------------------------------
def case_bytes(case: AgentCase) -> bytes:
    """The file form: 2-space JSON in the model's field order, fixtures without default fields, newline-terminated.

    Deterministic so that ``save(load(file))`` is byte-identical and a reviewed diff shows only real edits.
    """
    data = case.model_dump(mode="json", by_alias=True)
    data["fixtures"] = [f.model_dump(mode="json", exclude_defaults=True) for f in case.fixtures]
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def save_case(case: AgentCase, folder: str | Path) -> Path:
    """Write ``folder/<id>.json`` atomically (a crash never leaves half a case behind)."""
    return write_file(Path(folder) / f"{case.id}.json", case_bytes(case), atomic=True)


def load_case(path: str | Path) -> AgentCase:
    """Parse and fully validate one case file: schema, id = file name, declared checks, fixture keys."""
    path = Path(path)
    file = str(path)
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise CaseFileError(f"cannot read ({exc.strerror})", file=file) from None
    except orjson.JSONDecodeError as exc:
        raise CaseFileError(f"invalid JSON ({exc})", file=file) from None
    try:
        case = AgentCase.model_validate(data)
    except ValidationError as exc:
        loc, msg = pydantic_field(exc)
        raise CaseFileError(msg, file=file, field=loc) from None
    if case.id != path.stem:
        raise CaseFileError(f"id {case.id!r} does not match the file name {path.name!r}", file=file, field="id")
    try:
        case.compiled_checks()
    except CheckSpecError as exc:
        raise CaseFileError(str(exc).split(": ", 1)[-1], file=file, field=exc.field) from None
    for i, fx in enumerate(case.fixtures):
        ignore = case.ignore_args.get(fx.tool, ())
        expected = fixture_key(fx.tool, fx.args, ignore)
        if fx.key != expected and not _key_before_ignore(fx.key, fx.tool, fx.args, ignore):
            raise CaseFileError(f"key {fx.key!r} does not match its tool and args (expected {expected!r}; "
                                "args edited by hand? set the key to the expected value)",
                                file=file, field=f"fixtures.{i}.key")
    return case


def _key_before_ignore(key: str, tool: str, args: Any, ignore: Sequence[str]) -> bool:
    """True when ``key`` is the fixture's key under some of its ``ignore`` paths: it was harvested before
    the others were added (as the ``no_fixture`` hint tells). Replay recomputes keys, so it still matches;
    only args edited by hand leave no subset that gives the key."""
    paths = list(ignore)[:8]  # a handful in practice; 256 subsets at most
    return any(fixture_key(tool, args, subset) == key
               for n in range(len(paths)) for subset in itertools.combinations(paths, n))


SCHEMA_FILE = Path(__file__).with_name("case.schema.json")


def case_json_schema() -> dict[str, Any]:
    """JSON Schema of the case file, for editors and other tools (shipped as ``case.schema.json``)."""
    schema = AgentCase.model_json_schema(by_alias=True)
    schema["title"] = "harvester case file (harvester.case/1)"
    return schema


def write_case_schema(path: str | Path = SCHEMA_FILE) -> Path:
    """Regenerate the shipped schema after changing the model (a test fails until you do)."""
    return write_file(path, orjson.dumps(case_json_schema(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


# -- a folder of cases ------------------------------------------------------------------------
def default_cases_dir() -> Path:
    return Path(os.environ.get(CASES_ENV) or "cases")


def case_files(folder: str | Path) -> Iterator[Path]:
    """Every case file of a cases folder: accepted at the top, then pending/, then rejected/."""
    root = Path(folder)
    for sub in STATUS_FOLDERS.values():
        where = root / sub if sub else root
        if where.is_dir():
            yield from sorted(p for p in where.glob("*.json") if p.name != SUITE_FILE)


def load_cases(folder: str | Path | None = None, *, status: str | None = None) -> list[AgentCase]:
    """Every case of ``folder`` (default ``cases/`` or ``$HARVESTER_CASES``), optionally one status only.

    The replay job asks for ``status="accepted"``. Every file is validated, the filtered-out ones
    too: a broken pending case should be reported now, not on the day someone accepts it.
    """
    if status is not None and status not in STATUS_FOLDERS:
        raise CaseFileError(f"unknown status {status!r} (one of {', '.join(STATUS_FOLDERS)})", field="status")
    root = Path(folder) if folder is not None else default_cases_dir()
    if not root.is_dir():
        raise NotFoundError(f"{root}: no such cases folder (harvest some with: harvester harvest)")
    where: dict[str, Path] = {}
    out: list[AgentCase] = []
    for path in case_files(root):
        case = load_case(path)
        if case.id in where:
            raise CaseFileError(f"duplicate id {case.id!r} (also in {where[case.id]})", file=str(path), field="id")
        where[case.id] = path
        if status is None or case.status == status:
            out.append(case)
    return out


class CaseFolder:
    """The layout above: where a case of a given status lives, and moving it when its status changes."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cases_dir()

    def folder_for(self, status: str) -> Path:
        sub = STATUS_FOLDERS[status]
        return self.root / sub if sub else self.root

    def ids(self) -> set[str]:
        return {p.stem for p in case_files(self.root)}

    def find(self, case_id: str) -> Path:
        for status in STATUS_FOLDERS:
            path = self.folder_for(status) / f"{case_id}.json"
            if path.is_file():
                return path
        near = difflib.get_close_matches(case_id, sorted(self.ids()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else " (list them with: harvester cases list)"
        raise NotFoundError(f"no case {case_id!r} in {self.root}{hint}")

    def load(self, case_id: str) -> AgentCase:
        return load_case(self.find(case_id))

    def save(self, case: AgentCase) -> Path:
        """Write the case where its status says and remove any copy left under another status."""
        path = save_case(case, self.folder_for(case.status))
        for status in STATUS_FOLDERS:
            other = self.folder_for(status) / path.name
            if other != path and other.is_file():
                other.unlink()
        return path

    def accept(self, case_id: str, *, expected: str | None = None, required: Iterable[str] = ()) -> Path:
        """Mark a case accepted (moving it to the top folder), optionally with what it should answer."""
        case = self.load(case_id)
        if expected is not None:
            case.expected = expected
        case.required_elements = list(dict.fromkeys([*case.required_elements, *required]))
        case.status = "accepted"
        case.rejected_why = None
        return self.save(case)

    def reject(self, case_id: str, why: str) -> Path:
        case = self.load(case_id)
        case.status = "rejected"
        case.rejected_why = why
        return self.save(case)

    def unique_id(self, base: str, taken: set[str] | None = None) -> str:
        """``base``, or ``base-2``, ``base-3``... whichever no file (and nothing in ``taken``) uses yet."""
        used = self.ids() if taken is None else taken
        if base not in used:
            return base
        n = 2
        while f"{base}-{n}" in used:
            n += 1
        return f"{base}-{n}"


_MOVED = {"SuiteManifest", "suite_content", "read_suite", "bump_suite", "suite_info"}


def __getattr__(name: str) -> Any:
    """The suite manifest moved to ``harvester.suite``; its old names here keep working for one release."""
    if name in _MOVED:
        from . import suite

        warnings.warn(f"harvester.case.{name} moved to harvester.suite.{name}", DeprecationWarning, stacklevel=2)
        return getattr(suite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
