"""Cases: the in-code ``Case``, the reviewable case file ``AgentCase`` and the folder that holds them.

- ``_case``: ``Case``, the runnable form (a prompt and checks), written in code or compiled from a file.
- ``_format``: the case file format ``harvester.case/1`` (``AgentCase`` and its parts) and its JSON Schema.
- ``_file``: one file on disk (deterministic bytes, the full validating read, the light signature read).
- ``_folder``: a folder of cases by status, and ``CaseFolder`` moving a case when its status changes.
"""

from __future__ import annotations

from ._case import Case
from ._file import CaseSignature, case_bytes, check_order, load_case, read_signature, save_case
from ._folder import (
    CASES_ENV,
    STATUS_FOLDERS,
    SUITE_FILE,
    CaseFile,
    CaseFolder,
    CaseIds,
    case_files,
    case_signatures,
    default_cases_dir,
    load_cases,
)
from ._format import (
    NOTE_PREFIX,
    SCHEMA,
    SCHEMA_FILE,
    AgentCase,
    Fixture,
    InjectSpec,
    ModelTurn,
    OrderRule,
    Recorded,
    Source,
    Status,
    case_json_schema,
    write_case_schema,
)

__all__ = [
    "NOTE_PREFIX",
    "CASES_ENV",
    "SCHEMA",
    "SCHEMA_FILE",
    "STATUS_FOLDERS",
    "SUITE_FILE",
    "AgentCase",
    "Case",
    "CaseFile",
    "CaseFolder",
    "CaseIds",
    "CaseSignature",
    "Fixture",
    "InjectSpec",
    "ModelTurn",
    "OrderRule",
    "Recorded",
    "Source",
    "Status",
    "case_bytes",
    "check_order",
    "case_files",
    "case_json_schema",
    "case_signatures",
    "default_cases_dir",
    "load_case",
    "load_cases",
    "read_signature",
    "save_case",
    "write_case_schema",
]
