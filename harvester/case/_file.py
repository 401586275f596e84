"""One case file on disk: written byte-for-byte deterministic, read with every field checked, or read
lightly for what a re-harvest needs (its signature) without validating it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from .._files import MAX_READ_BYTES, read_file, write_file
from ..canonical import fixture_key
from ..errors import CaseFileError, CheckSpecError, pydantic_field
from ._format import AgentCase, check_id

__all__ = [
    "CaseSignature",
    "case_bytes",
    "case_of",
    "check_order",
    "load_case",
    "read_json",
    "read_signature",
    "save_case",
    "signature_of",
]


def case_bytes(case: AgentCase) -> bytes:
    """The file form: 2-space JSON in the model's field order, fixtures and model turns without default
    fields, newline-terminated.

    Deterministic so that ``save(load(file))`` is byte-identical and a reviewed diff shows only real edits.
    """
    data = case.model_dump(mode="json", by_alias=True)
    data["fixtures"] = [f.model_dump(mode="json", exclude_defaults=True) for f in case.fixtures]
    if case.model_fixtures:  # turns without their default fields: a reviewer reads what the model saw and said
        data["model_fixtures"] = [t.model_dump(mode="json", exclude_defaults=True) for t in case.model_fixtures]
    else:  # a case without them (older, or content capture off): its file stays as it was
        del data["model_fixtures"]
    if not case.recorded.mcp_tools:  # most recordings have none: their files stay as they were
        del data["recorded"]["mcp_tools"]
    if case.source.cluster is None:  # only ``harvest --by-cluster`` sets one: other files stay as they were
        del data["source"]["cluster"]
    for judged in ("judges", "labels"):  # a case without judges or labels: its file stays as it was
        if not data[judged]:
            del data[judged]
    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def save_case(case: AgentCase, folder: str | Path) -> Path:
    """Write ``folder/<id>.json`` atomically (a crash never leaves half a case behind).

    The id is checked again here: a ``model_copy(update=...)`` skips validation, and the id names the file.
    """
    try:
        check_id(case.id)
    except ValueError as exc:
        raise CaseFileError(str(exc), field="id") from None
    return write_file(Path(folder) / f"{case.id}.json", case_bytes(case), atomic=True)


def read_json(path: Path, max_bytes: int) -> Any:
    """A case file's JSON: a regular file of at most ``max_bytes`` (the config's ``max_file_bytes``)."""
    try:
        return orjson.loads(read_file(path, limit=max_bytes, error=CaseFileError))
    except orjson.JSONDecodeError as exc:
        raise CaseFileError(f"invalid JSON ({exc})", file=str(path)) from None


def load_case(path: str | Path, *, max_bytes: int = MAX_READ_BYTES) -> AgentCase:
    """Parse and fully validate one case file: schema, id = file name, order, declared checks, fixture keys."""
    path = Path(path)
    return case_of(read_json(path, max_bytes), path)


def case_of(data: Any, path: Path) -> AgentCase:
    """``load_case`` of a file already parsed (a folder's walk parses each file once, then validates the
    cases it runs)."""
    file = str(path)
    try:
        case = AgentCase.model_validate(data)
    except ValidationError as exc:
        loc, msg = pydantic_field(exc)
        raise CaseFileError(msg, file=file, field=loc) from None
    if case.id != path.stem:
        raise CaseFileError(f"id {case.id!r} does not match the file name {path.name!r}", file=file, field="id")
    check_order(case, file)
    try:
        case.compiled_checks()
    except CheckSpecError as exc:
        raise CaseFileError(str(exc).split(": ", 1)[-1], file=file, field=exc.field) from None
    for i, fx in enumerate(case.fixtures):
        ignore = case.ignore_args.get(fx.tool, ())
        expected = fixture_key(fx.tool, fx.args, ignore)
        if fx.key != expected and not _key_before_ignore(fx.key, fx.tool, fx.args, ignore):
            raise CaseFileError(
                f"key {fx.key!r} does not match its tool and args (expected {expected!r}; "
                "args edited by hand? set the key to the expected value)",
                file=file,
                field=f"fixtures.{i}.key",
            )
    return case


def check_order(case: AgentCase, file: str | None = None) -> None:
    """A ``CaseFileError`` naming the first ``order`` entry that names a call the case does not record
    (a rule about a call the replay is never compared with would pass forever, checking nothing), or
    whose ``after`` names its own call (a call never comes before itself: the rule could never pass)."""
    recorded = case.recording().records()
    for i, rule in enumerate(case.order):
        if rule.call in rule.after:
            raise CaseFileError(
                f"{rule.call!r} cannot come after itself (name the calls that must come before it)",
                file=file,
                field=f"order.{i}.after.{rule.after.index(rule.call)}",
            )
        for field, name in [("call", rule.call), *((f"after.{j}", a) for j, a in enumerate(rule.after))]:
            if name not in recorded:
                known = ", ".join(sorted(recorded)) or "nothing"
                raise CaseFileError(
                    f"{name!r} is not a call this case records (it records: {known})",
                    file=file,
                    field=f"order.{i}.{field}",
                )


def _key_before_ignore(key: str, tool: str, args: Any, ignore: Sequence[str]) -> bool:
    """True when ``key`` is the fixture's key under some of its ``ignore`` paths: it was harvested before
    the others were added (as the ``no_fixture`` hint tells). Replay recomputes keys, so it still matches;
    only args edited by hand leave no subset that gives the key."""
    paths = list(ignore)[:8]  # a handful in practice; 256 subsets at most
    return any(
        fixture_key(tool, args, subset) == key for n in range(len(paths)) for subset in itertools.combinations(paths, n)
    )


class CaseSignature(NamedTuple):
    """What a re-harvest reads of a case file: whose runs it holds and which failure it stands for."""

    path: Path
    status: str
    signature: str | None  # ``harvest.signature()`` of its run(s)
    last_seen: str | None  # start time of the newest run counted in ``source.seen``
    trace_id: str | None
    run_id: str | None
    id: str | None = None
    prompt: str | None = None
    forbidden: tuple[str, ...] = ()  # its forbidden_tools
    incident: bool = False  # made from a reported run (``harvester incident``)
    earlier: tuple[str, ...] = ()  # signatures it had before ``rerecord``: their runs are this case's
    cluster: str | None = None  # the failure cluster ``harvest --by-cluster`` proposed it for


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def read_signature(path: Path, *, max_bytes: int = MAX_READ_BYTES) -> CaseSignature:
    """The light read: JSON parsed, nothing validated (a harvest reads every case of a folder; the full
    check is ``load_case``'s, when a case is run or reviewed)."""
    return signature_of(read_json(path, max_bytes), path)


def signature_of(data: Any, path: Path) -> CaseSignature:
    """``read_signature`` of a file already parsed."""
    data = data if isinstance(data, dict) else {}
    source = data["source"] if isinstance(data.get("source"), dict) else {}

    def text(value: Any) -> str | None:
        return value if isinstance(value, str) and value else None

    return CaseSignature(
        path,
        str(data.get("status", "pending")),
        text(source.get("signature")),
        text(source.get("last_seen")) or text(source.get("captured_at")),
        text(source.get("trace_id")),
        text(source.get("run_id")),
        text(data.get("id")),
        text(data.get("prompt")),
        tuple(t for t in _list(data.get("forbidden_tools")) if isinstance(t, str)),
        source.get("incident") is True or source.get("failure_kind") == "unintended_action",
        tuple(s for s in _list(source.get("earlier_signatures")) if isinstance(s, str)),
        text(source.get("cluster")),
    )
