"""Cases: the in-code ``Case``, the reviewable case file ``AgentCase`` and the folder that holds them.

- ``_case``: ``Case``, the runnable form (a prompt and checks), written in code or compiled from a file.
- ``_format``: the case file format ``harvester.case/1`` (``AgentCase`` and its parts) and its JSON Schema.
- ``_file``: one file on disk (deterministic bytes, the full validating read, the light signature read).
- ``_folder``: a folder of cases by status, and ``CaseFolder`` moving a case when its status changes.
- ``_stats``: what an accepted suite can measure (its mix by kind, abstention, recovery, coverage).
- ``_review``: review actions (accept, reject, edit; one case or many), shared by every way of reviewing.
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
    Label,
    ModelTurn,
    OrderRule,
    Recorded,
    Source,
    Status,
    case_json_schema,
    write_case_schema,
)
from ._review import (
    EDITABLE,
    Decisions,
    accept_cases,
    edit_case,
    field_update,
    label_answer,
    labelled,
    pending_ids,
    reject_cases,
)
from ._stats import SuiteStats, daily_tools, kind_of, suite_stats

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
    "Decisions",
    "EDITABLE",
    "CaseFolder",
    "CaseIds",
    "CaseSignature",
    "Fixture",
    "InjectSpec",
    "Label",
    "ModelTurn",
    "OrderRule",
    "Recorded",
    "Source",
    "Status",
    "SuiteStats",
    "accept_cases",
    "case_bytes",
    "check_order",
    "case_files",
    "case_json_schema",
    "case_signatures",
    "daily_tools",
    "default_cases_dir",
    "edit_case",
    "field_update",
    "label_answer",
    "labelled",
    "kind_of",
    "load_case",
    "load_cases",
    "pending_ids",
    "read_signature",
    "reject_cases",
    "save_case",
    "suite_stats",
    "write_case_schema",
]
