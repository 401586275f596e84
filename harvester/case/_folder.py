"""A folder of cases: where each status lives, every file of it, and moving a case when its status changes.

Layout (``cases/`` by default, ``$HARVESTER_CASES`` or the config's ``cases_dir``)::

    cases/suite.json          the suite manifest (``harvester.suite``): name, version, hash of the accepted cases
    cases/<id>.json           accepted cases: what the nightly replay runs
    cases/pending/<id>.json   harvested, waiting for review
    cases/rejected/<id>.json  reviewed and turned down; kept so a re-harvest does not propose them again

The file name is the case id, so ``harvester accept ID`` finds a case without reading the others; an
id is checked (``check_id``) before any path is built from it, so ``../x`` never names a file outside.
The ``status`` field is authoritative (``load_cases(status=...)`` filters on it); ``CaseFolder.save``
keeps each file in the sub-folder its status names.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .._files import MAX_READ_BYTES, shown_path
from ..errors import CaseFileError, InputError, NotFoundError
from ._file import CaseSignature, case_of, load_case, read_json, read_signature, save_case
from ._format import AgentCase, check_id
from ._secrets import secret_fields

if TYPE_CHECKING:
    from ..config import Config
    from ..redact import Redactor

__all__ = [
    "CASES_ENV",
    "STATUS_FOLDERS",
    "SUITE_FILE",
    "CaseFile",
    "CaseFolder",
    "CaseIds",
    "case_files",
    "case_signatures",
    "default_cases_dir",
    "load_cases",
]

CASES_ENV = "HARVESTER_CASES"
SUITE_FILE = "suite.json"
STATUS_FOLDERS: dict[str, str] = {"accepted": "", "pending": "pending", "rejected": "rejected"}


def default_cases_dir() -> Path:
    return Path(os.environ.get(CASES_ENV) or "cases")


def case_files(folder: str | Path) -> Iterator[Path]:
    """Every case file of a cases folder: accepted at the top, then pending/, then rejected/."""
    root = Path(folder)
    for sub in STATUS_FOLDERS.values():
        where = root / sub if sub else root
        if where.is_dir():
            yield from sorted(p for p in where.glob("*.json") if p.name != SUITE_FILE)


def case_signatures(folder: str | Path, *, max_bytes: int = MAX_READ_BYTES) -> Iterator[CaseSignature]:
    """``read_signature`` of every case file of a folder, in ``case_files`` order."""
    for path in case_files(folder):
        yield read_signature(path, max_bytes=max_bytes)


def load_cases(
    folder: str | Path | None = None, *, status: str | None = None, max_bytes: int = MAX_READ_BYTES
) -> list[AgentCase]:
    """Every case of ``folder`` (default ``cases/`` or ``$HARVESTER_CASES``), optionally one status only.

    Every file is validated, the filtered-out ones too (a command that needs only some of them walks
    ``CaseFolder.each``, which validates only those). A file over ``max_bytes`` (the config's
    ``max_file_bytes``) or not a regular file is refused.
    """
    if status is not None and status not in STATUS_FOLDERS:
        raise CaseFileError(f"unknown status {status!r} (one of {', '.join(STATUS_FOLDERS)})", field="status")
    root = Path(folder) if folder is not None else default_cases_dir()
    if not root.is_dir():
        raise NotFoundError(f"{root}: no such cases folder (harvest some with: harvester harvest)")
    where: dict[str, Path] = {}
    out: list[AgentCase] = []
    for path in case_files(root):
        case = load_case(path, max_bytes=max_bytes)
        if case.id in where:
            raise CaseFileError(f"duplicate id {case.id!r} (also in {where[case.id]})", file=str(path), field="id")
        where[case.id] = path
        if status is None or case.status == status:
            out.append(case)
    return out


class CaseFile(NamedTuple):
    """An accepted case as a walk of its folder read it: the validated case, and its file to read it again."""

    path: Path
    case: AgentCase
    max_bytes: int  # the limit it was read under, to read it again


class CaseFolder:
    """The layout above: where a case of a given status lives, and moving it when its status changes.

    ``max_bytes``: the largest case file read (the config's ``max_file_bytes``). ``redactor``: the
    rules ``accept`` scans a case with (default: the built-in ones).
    """

    def __init__(
        self, root: str | Path | None = None, *, max_bytes: int = MAX_READ_BYTES, redactor: Redactor | None = None
    ) -> None:
        self.root = Path(root) if root is not None else default_cases_dir()
        self.max_bytes = max_bytes
        self._redactor = redactor

    @classmethod
    def for_project(cls, config: Config, cases_dir: str | Path | None = None) -> CaseFolder:
        """The folder every command and the pytest plugin use: ``cases_dir`` (an option), else
        ``$HARVESTER_CASES``, else the config's ``cases_dir``; the config's size limit and redaction
        rules (with redaction off the scan keeps the built-in ones)."""
        from ..redact import Redactor, redaction_for

        rules = redaction_for(config)
        return cls(
            cases_dir or os.environ.get(CASES_ENV) or config.cases_dir,
            max_bytes=config.max_file_bytes,
            redactor=rules if isinstance(rules, Redactor) else None,
        )

    def accepted(self) -> list[AgentCase]:
        """The accepted cases, in id order; none is an error saying what to do (``each_accepted``)."""
        return [file.case for file in self.each_accepted()]

    def each_accepted(self, *, required: bool = True) -> Iterator[CaseFile]:
        """``each("accepted")``; ``required``: none is an ``InputError`` saying what to do, once every file was read."""
        found = False
        for file in self.each("accepted"):
            found = True
            yield file
        if required and not found:
            pending = sum(c.status == "pending" for c in case_signatures(self.root, max_bytes=self.max_bytes))
            hint = f"{pending} pending: run harvester review" if pending else "harvest some with: harvester harvest"
            raise InputError(f"no accepted cases in {shown_path(self.root)}/ ({hint})")

    def each(self, status: str | None = None) -> Iterator[CaseFile]:
        """Every case of ``status`` (None: all) in id order, each file parsed once: those validated in full,
        the others read for their status and id only (a case is validated when it is run, shown or changed).

        Ids are unique across statuses. The caller holds what it keeps: a replay, a small record per case.
        """
        self._exists()
        where: dict[str, Path] = {}
        for path in sorted(case_files(self.root), key=lambda p: p.stem):  # stable: the top folder first
            data = read_json(path, self.max_bytes)
            if not isinstance(data, dict):
                raise CaseFileError(f"a case file is a JSON object, not {type(data).__name__}", file=str(path))
            case = case_of(data, path) if status is None or data.get("status", "pending") == status else None
            named = data.get("id")
            case_id = case.id if case is not None else named if isinstance(named, str) else path.stem
            if case_id in where:
                raise CaseFileError(f"duplicate id {case_id!r} (also in {where[case_id]})", file=str(path), field="id")
            where[case_id] = path
            if case is not None:
                yield CaseFile(path, case, self.max_bytes)

    def _exists(self) -> None:
        if not self.root.is_dir():
            raise NotFoundError(f"{self.root}: no such cases folder (harvest some with: harvester harvest)")

    def folder_for(self, status: str) -> Path:
        sub = STATUS_FOLDERS[status]
        return self.root / sub if sub else self.root

    def ids(self) -> set[str]:
        return {p.stem for p in case_files(self.root)}

    def ids_with(self, status: str) -> list[str]:
        """The ids of the cases of ``status`` in id order, each file read lightly (``read_signature``)."""
        self._exists()
        light = case_signatures(self.root, max_bytes=self.max_bytes)
        return sorted(c.id or c.path.stem for c in light if c.status == status)

    def cases(self, status: str | None = None) -> list[AgentCase]:
        """``load_cases`` of this folder, with its size limit."""
        return load_cases(self.root, status=status, max_bytes=self.max_bytes)

    def find(self, case_id: str) -> Path:
        """The file of ``case_id`` under any status; an id that is not one is refused before any path is built."""
        try:
            check_id(case_id)
        except ValueError as exc:
            raise InputError(str(exc), field="id") from None
        for status in STATUS_FOLDERS:
            path = self.folder_for(status) / f"{case_id}.json"
            if path.is_file():
                return path
        near = difflib.get_close_matches(case_id, sorted(self.ids()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else " (list them with: harvester cases list)"
        raise NotFoundError(f"no case {case_id!r} in {self.root}{hint}")

    def load(self, case_id: str) -> AgentCase:
        return load_case(self.find(case_id), max_bytes=self.max_bytes)

    def secret_fields(self, case: AgentCase) -> list[str]:
        """The fields of ``case`` a redaction rule still matches (``harvester.case._secrets``)."""
        if self._redactor is None:
            from ..redact import Redactor

            self._redactor = Redactor()
        return secret_fields(case, self._redactor)

    def save(self, case: AgentCase) -> Path:
        """Write the case where its status says and remove any copy left under another status."""
        path = save_case(case, self.folder_for(case.status))
        for status in STATUS_FOLDERS:
            other = self.folder_for(status) / path.name
            if other != path and other.is_file():
                other.unlink()
        return path

    def accept(
        self,
        case_id: str,
        *,
        expected: str | None = None,
        required: Iterable[str] = (),
        force: bool = False,
        judge: str | None = None,
    ) -> Path:
        """Mark a case accepted (moving it to the top folder), optionally with what it should answer.

        Refused (``InputError``, nothing moved) unless ``force``: a case whose review notes say it is
        broken (a truncated result, payloads not captured), as the nightly replay would judge the agent
        against a wrong recording; and a case a redaction rule still matches (``secret_fields``), as an
        accepted case is committed and shared.
        """
        case = self.load(case_id)
        blockers = case.blocking_notes()
        if blockers and not force:
            raise InputError(
                f"case {case_id!r} is not ready: {'; '.join(blockers)}. Fix it and delete the note from "
                f"review_notes, or accept with --force",
                file=str(self.find(case_id)),
                field="review_notes",
            )
        leaks = [] if force else self.secret_fields(case)
        if leaks:
            raise InputError(
                f"case {case_id!r} still holds what a redaction rule matches, in {', '.join(leaks)}: "
                "replace the secret by hand, or accept with --force",
                file=str(self.find(case_id)),
            )
        if expected is not None:
            case.expected = expected
            if judge is not None and not case.judges:  # what it expects is a judge's question
                case.judges = [judge]
        case.required_elements = list(dict.fromkeys([*case.required_elements, *required]))
        case.status = "accepted"
        case.rejected_why = None
        return self.save(case)

    def reject(self, case_id: str, why: str) -> Path:
        case = self.load(case_id)
        case.status = "rejected"
        case.rejected_why = why
        return self.save(case)

    def unique_id(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``... whichever no file uses yet (one case: ``CaseIds`` names many)."""
        return CaseIds(self.ids()).claim(base)


class CaseIds:
    """The ids a folder holds, and the next free one for a base: ``base``, else ``base-2``, ``base-3``...

    Each base remembers the suffix it reached, so naming N cases after one slug (a templated prompt's
    first words) costs about N probes, not N*N/2; the id a case gets is the one a probe from ``-2``
    would give, so ids stay readable and a re-harvest of the same runs names them the same way.
    """

    def __init__(self, taken: Iterable[str]) -> None:
        self._taken = set(taken)
        self._next: dict[str, int] = {}  # base -> the suffix to try first

    def claim(self, base: str) -> str:
        """The next free id for ``base``, now taken."""
        if base in self._taken:
            n = self._next.get(base, 2)
            while f"{base}-{n}" in self._taken:
                n += 1
            self._next[base] = n + 1
            base = f"{base}-{n}"
        self._taken.add(base)
        return base
