"""Every harvested check (``checks.HARVESTED``) through one contract: it keeps the ``HarvestedCheck``
protocol, harvest proposes it from a run (and it passes on that run), ``harvester review`` edits it and
the file round-trips byte for byte, a rerecord keeps the reviewer's edit, and ``cases show`` shows it.

A check registered in the table runs here without an entry of its own: the reviewer answers each of
its questions with another choice than the default, or with what the question shows for a smaller
recording's case (its rules for fewer calls)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester import checks
from harvester.case import AgentCase, CaseFolder, case_bytes, load_case
from harvester.cli import main
from harvester.cli.review import EDITABLE
from harvester.config import Config
from harvester.harvest import case_from_run, rerecord
from harvester.model import Run
from tests.builders.runs import call, run

ORDER = {"order_id": "A1001"}
CONFIG = Config(mutating_tools=["issue_refund"])
LOOKUP, FAILED_LOOKUP = call("get_order", args=ORDER), call("get_order", "error", args=ORDER)
REFUND = call("issue_refund", args=ORDER)
# Production: the policy looked up, a lookup that timed out and its retry, then the refund.
RUN = run(call("kb_search", args={"query": "refund policy"}), FAILED_LOOKUP, LOOKUP, REFUND)
SMALLER = run(LOOKUP, REFUND, trace="s" * 32)  # the same situation with fewer calls
NEWER = run(call("kb_search", args={"query": "return policy A1001"}), LOOKUP, REFUND, trace="n" * 32)
BY_NAME = {check.name: check for check in checks.HARVESTED}


@pytest.fixture(params=sorted(BY_NAME))
def check(request: pytest.FixtureRequest) -> checks.HarvestedCheck:
    return BY_NAME[request.param]


def harvested(r: Run = RUN) -> AgentCase:
    return case_from_run(r, config=CONFIG)


def defaults(check: checks.HarvestedCheck, case: AgentCase) -> list[str]:
    """The default of each question review asks to edit ``check`` on ``case`` (Enter on every one)."""
    shown: list[str] = []

    def enter(question: str, default: str, choices: Sequence[str] = ()) -> str:
        shown.append(default)
        return default

    check.edit(case.held(check), case.recording(), enter)
    return shown


def reviewer_answers(check: checks.HarvestedCheck, case: AgentCase) -> list[str]:
    """What a reviewer types to edit ``check`` on ``case``: another choice than the default where a question
    offers choices (never '-', which drops), else the text the question shows for ``SMALLER``'s case."""
    answers: list[str] = []

    def ask(question: str, default: str, choices: Sequence[str] = ()) -> str:
        if choices:
            answer = next(c for c in choices if c not in (default, "-"))
        else:
            answer = defaults(check, harvested(SMALLER))[len(answers)]
        answers.append(answer)
        return answer

    check.edit(case.held(check), case.recording(), ask)
    return answers


def scripted(answers: list[str]) -> checks.Ask:
    left = iter(answers)
    return lambda question, default, choices=(): next(left)


def review(folder: CaseFolder, case_id: str, field: str, answers: list[str]):
    typed = "".join(f"{a}\n" for a in ["e", field, *answers, "s"])
    return CliRunner().invoke(main, ["review", case_id, "--cases", str(folder.root)], input=typed)


def shown_as(check: checks.HarvestedCheck, case: AgentCase) -> list[str]:
    """What a case's screen says of ``check``: its own line, or its checks' labels."""
    line = check.render(case.held(check))
    if line is not None:
        return [f"{check.field + ':':<19}{line}"]
    return [c.label() for c in case.compiled_checks() if c.name == check.name]


# -- the protocol -----------------------------------------------------------------------------------
def test_a_registered_check_keeps_the_protocol(check: checks.HarvestedCheck) -> None:
    assert isinstance(check, checks.HarvestedCheck)
    assert check.name in checks.REGISTRY
    assert check.slot == checks.CHECKS or check.slot in AgentCase.model_fields  # a field of its own is the case's
    for member, declared in vars(checks.HarvestedCheck).items():
        if inspect.isfunction(declared) and not member.startswith("_"):
            assert (
                list(inspect.signature(getattr(check, member)).parameters)
                == list(inspect.signature(declared).parameters)[1:]
            ), member


def test_review_offers_each_harvested_check_once_under_its_own_field() -> None:
    assert len(EDITABLE) == len(set(EDITABLE))
    assert [check.field for check in checks.HARVESTED] == list(EDITABLE[-len(checks.HARVESTED) :])


# -- propose ----------------------------------------------------------------------------------------
def test_harvest_proposes_it_and_it_passes_on_the_run_it_came_from(check: checks.HarvestedCheck) -> None:
    case = harvested()
    value = case.held(check)
    assert value, f"the conformance run proposes no {check.name}: give RUN the calls it is proposed from"
    assert value == check.propose(case.recording(), CONFIG)
    made = [c for c in case.compiled_checks() if c.name == check.name]
    assert made and all(c(RUN)[0] is True for c in made), [c(RUN) for c in made]
    fields = case.model_dump(by_alias=True)
    assert checks.placed(check, fields, value)[check.slot] == fields[check.slot]


# -- review -----------------------------------------------------------------------------------------
def test_review_edits_it_and_the_case_file_round_trips(check: checks.HarvestedCheck, tmp_path: Path) -> None:
    folder = CaseFolder(tmp_path)
    case = harvested()
    path = folder.save(case)
    before = path.read_bytes()
    assert review(folder, case.id, check.field, [""] * len(defaults(check, case))).exit_code == 0
    assert path.read_bytes() == before  # Enter on every question keeps it as it was

    answers = reviewer_answers(check, case)
    wanted = check.edit(case.held(check), case.recording(), scripted(answers))
    assert wanted != case.held(check), "the reviewer's answers changed nothing"
    out = review(folder, case.id, check.field, answers)
    assert out.exit_code == 0, out.output
    edited = load_case(path)
    assert edited.held(check) == wanted
    assert case_bytes(edited) == path.read_bytes()  # the edited file loads and saves byte-identical
    for text in shown_as(check, edited):
        assert text in out.output  # the case is shown again at once, edited


# -- refresh ----------------------------------------------------------------------------------------
def test_a_rerecord_keeps_the_reviewers_edit(check: checks.HarvestedCheck) -> None:
    case = harvested()
    fields = case.model_dump(by_alias=True)
    edit = check.edit(case.held(check), case.recording(), scripted(reviewer_answers(check, case)))
    edited = AgentCase.model_validate({**fields, "status": "accepted", **checks.placed(check, fields, edit)})

    same = rerecord(edited, RUN, config=CONFIG)
    assert same.case.held(check) == edit and same.changes == []

    newer = rerecord(edited, NEWER, config=CONFIG)
    assert set(check.changes(edit, newer.case.held(check))) <= set(newer.changes)
    back = rerecord(newer.case, RUN, config=CONFIG)  # the edit survived the newer recording
    assert back.case.held(check) == edit
    assert check.changes(edit, edit) == []


# -- render -----------------------------------------------------------------------------------------
def test_cases_show_shows_it(check: checks.HarvestedCheck, tmp_path: Path) -> None:
    folder = CaseFolder(tmp_path)
    case = harvested()
    folder.save(case)
    out = CliRunner().invoke(main, ["cases", "show", case.id, "--cases", str(tmp_path)])
    assert out.exit_code == 0, out.output
    for text in shown_as(check, case):
        assert text in out.output
