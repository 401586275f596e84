"""The suite manifest, ``cases/suite.json``: which version of the golden suite a report ran.

The version is semver: a change to the accepted cases' content bumps the minor version
(``harvester suite bump``); accepted cases edited since the last bump show as ``1.3.0+<hash8>``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._files import MAX_READ_BYTES, read_file, write_file
from .canonical import ListDigest, digest
from .case import SUITE_FILE, AgentCase, CaseFolder, default_cases_dir, load_cases
from .errors import CaseFileError, pydantic_field

__all__ = ["SuiteContent", "SuiteManifest", "bump_suite", "read_suite", "suite_content", "suite_info"]


_SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\+[0-9a-f]+)?")


class SuiteManifest(BaseModel):
    """``cases/suite.json``: which version of the golden suite a report ran (semver; content changes bump minor)."""

    schema_: Literal["harvester.suite/1"] = Field("harvester.suite/1", alias="schema")
    name: str
    version: str = "1.0.0"
    content_hash: str
    cases: int = 0

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        if not _SEMVER.fullmatch(value):
            raise ValueError(f"{value!r} is not MAJOR.MINOR.PATCH[+build]")
        return value


def _body(case: AgentCase) -> dict[str, object]:
    """What of a case the suite hash covers: fields at their defaults are left out, so a field a later
    harvester adds does not change the hash of a suite that never set it."""
    return case.model_dump(mode="json", by_alias=True, exclude_defaults=True)


class SuiteContent:
    """``suite_content`` fed the accepted cases one at a time, in id order, as a replay reads them: the
    hash of what was loaded, without holding the cases or reading them again."""

    def __init__(self) -> None:
        self._digest = ListDigest()
        self.count = 0
        self._last: str | None = None

    def add(self, case: AgentCase) -> AgentCase:
        if self._last is not None and case.id <= self._last:
            raise ValueError(f"suite content is fed in id order: {case.id!r} came after {self._last!r}")
        self._digest.add(_body(case))
        self._last, self.count = case.id, self.count + 1
        return case

    def result(self) -> tuple[str, int] | None:
        """(content hash, how many), or None for a case only the whole list encodes (``ListDigest``)."""
        hexdigest = self._digest.hexdigest(length=64)
        return None if hexdigest is None else (hexdigest, self.count)


def suite_content(folder: str | Path, *, max_bytes: int = MAX_READ_BYTES) -> tuple[str, int]:
    """(sha256 over the accepted cases' canonical content, how many): formatting and pending cases never count."""
    content = SuiteContent()
    for file in CaseFolder(folder, max_bytes=max_bytes).each_accepted(required=False):
        content.add(file.case)
    got = content.result()
    if got is not None:
        return got
    accepted = sorted(load_cases(folder, status="accepted", max_bytes=max_bytes), key=lambda c: c.id)
    return digest([_body(c) for c in accepted], length=64), len(accepted)


def read_suite(folder: str | Path, *, max_bytes: int = MAX_READ_BYTES) -> SuiteManifest | None:
    path = Path(folder) / SUITE_FILE
    if not os.path.lexists(path):  # anything else there (a link to a device, a FIFO) is refused by read_file
        return None
    try:
        return SuiteManifest.model_validate(orjson.loads(read_file(path, limit=max_bytes, error=CaseFileError)))
    except orjson.JSONDecodeError as exc:
        raise CaseFileError(f"invalid JSON ({exc})", file=str(path)) from None
    except ValidationError as exc:
        loc, msg = pydantic_field(exc)
        raise CaseFileError(msg, file=str(path), field=loc) from None


def bump_suite(
    folder: str | Path | None = None, *, name: str | None = None, max_bytes: int = MAX_READ_BYTES
) -> SuiteManifest:
    """Write ``suite.json`` with the minor version raised when the accepted cases changed (1.0.0 the first time)."""
    root = Path(folder) if folder is not None else default_cases_dir()
    current = read_suite(root, max_bytes=max_bytes)
    content_hash, count = suite_content(root, max_bytes=max_bytes)
    if current is not None and current.content_hash == content_hash and (name is None or name == current.name):
        return current
    if current is None:
        version = "1.0.0"
    elif current.content_hash == content_hash:
        version = current.version
    else:
        major, minor, _ = (int(p) for p in _SEMVER.fullmatch(current.version).groups())  # type: ignore[union-attr]
        version = f"{major}.{minor + 1}.0"
    manifest = SuiteManifest(
        name=name or (current.name if current else _default_name(root)),
        version=version,
        content_hash=content_hash,
        cases=count,
    )
    write_file(
        root / SUITE_FILE,
        orjson.dumps(manifest.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2) + b"\n",
        atomic=True,
    )
    return manifest


def suite_info(folder: str | Path | None = None, content: tuple[str, int] | None = None) -> SuiteManifest:
    """What a report should record as the suite it ran.

    Accepted cases edited since the last bump show as ``1.3.0+<hash8>`` (semver build metadata), so
    a report never claims a version whose content it did not run. ``content``: the accepted cases'
    (hash, count) as the replay read them (``SuiteContent``); without it they are read here.
    """
    root = Path(folder) if folder is not None else default_cases_dir()
    current = read_suite(root)
    content_hash, count = content if content is not None else suite_content(root)
    if current is not None and current.content_hash == content_hash:
        return current
    base = current.version if current else "0.0.0"
    return SuiteManifest(
        name=current.name if current else _default_name(root),
        version=f"{base}+{content_hash[:8]}",
        content_hash=content_hash,
        cases=count,
    )


def _default_name(root: Path) -> str:
    resolved = root.resolve()
    return resolved.parent.name if resolved.name == "cases" and resolved.parent.name else resolved.name
