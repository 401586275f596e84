"""Bulk decisions (issue 35 item 3): ``accept ID...``, ``reject ID...`` and ``accept --pending [--tag]
[--cluster]`` decide many cases at once, each refused on its own for today's reasons, one summary line
and exit 2 when any was refused, the others decided all the same."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harvester.case import CaseFolder, edit_case, load_case, save_case
from harvester.cli import main
from harvester.errors import CaseFileError
from tests.builders.agents import case
from tests.builders.cli import one_line_error

API_KEY = "sk-proj-abcdefghijklmnopqrstuvwx1234"
BROKEN = "c3"  # its review notes say the recording is incomplete


@pytest.fixture
def cases(tmp_path, monkeypatch):
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    root = tmp_path / "cases"
    for i in range(10):
        notes = ["payloads were not captured (content capture off): fill them in"] if f"c{i}" == BROKEN else []
        source = {"cluster": "cab" if i < 4 else None, "agent": "support"}
        save_case(
            case(
                f"c{i}", status="pending", tags=["billing" if i % 2 else "shipping"], review_notes=notes, source=source
            ),
            root / "pending",
        )
    return root


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _status(root, case_id):
    for where in (root, root / "pending", root / "rejected"):
        if (where / f"{case_id}.json").is_file():
            return load_case(where / f"{case_id}.json").status
    return None


def test_accept_ten_with_one_broken_accepts_nine_and_names_it(cases):
    before = (cases / "pending" / f"{BROKEN}.json").read_bytes()
    result = invoke("accept", *(f"c{i}" for i in range(10)), "--cases", str(cases))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == f"error: accepted 9 of 10 cases; refused 1: {BROKEN}"
    [why] = [line for line in result.stderr.splitlines() if line.startswith(f"refused {BROKEN}: ")]
    assert "payloads were not captured" in why and "--force" in why
    assert [_status(cases, f"c{i}") for i in range(10)].count("accepted") == 9
    assert (cases / "pending" / f"{BROKEN}.json").read_bytes() == before


def test_a_secret_is_refused_on_its_own_too_and_unknown_ids_are_named(cases):
    leaky = case(
        "c1", status="pending", tags=["billing"], recorded={"answer": f"key {API_KEY}", "trajectory": ["kb_search"]}
    )
    save_case(leaky, cases / "pending")
    result = invoke("accept", "c0", "c1", "nope", "c2", "--cases", str(cases))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "error: accepted 2 of 4 cases; refused 1: c1; unknown: nope"
    assert API_KEY not in result.stderr and "recorded.answer" in result.stderr
    assert (_status(cases, "c0"), _status(cases, "c1"), _status(cases, "c2")) == ("accepted", "pending", "accepted")


def test_accept_pending_by_tag_and_by_cluster(cases):
    result = invoke("accept", "--pending", "--tag", "billing", "--cases", str(cases))
    assert result.exit_code == 2 and "refused 1: c3" in result.stderr  # c3 is billing, and broken
    assert {f"c{i}" for i in range(10) if _status(cases, f"c{i}") == "accepted"} == {"c1", "c5", "c7", "c9"}
    result = invoke("accept", "--pending", "--cluster", "cab", "--cases", str(cases))
    assert (
        result.exit_code == 2 and result.stderr.splitlines()[-1] == "error: accepted 2 of 3 cases; refused 1: c3"
    )  # c1: accepted above
    assert _status(cases, "c0") == "accepted" and _status(cases, "c4") == "pending"  # c4: another cluster
    ok = invoke("accept", "--pending", "--cases", str(cases), "--force")
    assert ok.exit_code == 0 and ok.stdout.splitlines()[0] == "accepted 4 of 4 cases"
    assert all(_status(cases, f"c{i}") == "accepted" for i in range(10))


def test_bulk_reject_and_json(cases):
    result = invoke("reject", "c0", "c1", "zz", "--why", "duplicates", "--json", "--cases", str(cases))
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["verdict"] == "rejected" and sorted(data["done"]) == ["c0", "c1"] and data["unknown"] == ["zz"]
    assert load_case(cases / "rejected" / "c0.json").rejected_why == "duplicates"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["accept", "--pending", "--cluster", "c0ffee"], ["no case was proposed for cluster 'c0ffee'", "cab"]),
        (["accept", "--tag", "billing"], ["add --pending"]),
        (["accept"], ["name the cases to accept"]),
    ],
)
def test_bad_bulk_input_is_one_line_nothing_moved(cases, args, needles):
    result = CliRunner().invoke(main, [*args, "--cases", str(cases)], catch_exceptions=False)
    one_line_error(result, *needles)
    assert all(_status(cases, f"c{i}") == "pending" for i in range(10))


def test_edit_case_validates_as_a_file_is_loaded_and_saves_nothing_refused(cases):
    folder = CaseFolder(cases)
    c0 = folder.load("c0")
    before = (cases / "pending" / "c0.json").read_bytes()
    with pytest.raises(CaseFileError, match="min_steps"):
        edit_case(folder, c0, {"min_steps": -1})
    assert (cases / "pending" / "c0.json").read_bytes() == before
    edited = edit_case(folder, c0, {"tags": ["edge"], "why": "a late return"})
    assert load_case(cases / "pending" / "c0.json") == edited and edited.tags == ["edge"]
