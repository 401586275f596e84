"""``harvester review --web`` in the machine's Chromium: a reviewer, on the page and without reading docs,
accepts two cases, edits one (its tags, its trajectory mode), labels its answer bad and rejects one; a
field edit the terminal would refuse shows an error and changes nothing. The case files are then byte for
byte what the terminal review, ``accept`` and ``reject`` write for the same decisions on a copy of the
folder. The cases are harvested from the recorded example traces (two failure clusters, three other
runs), plus one whose prompt and answer are hostile markup: it stays text."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester.case import CaseFolder, save_case
from harvester.cli import _review_web as review_web
from harvester.cli import main
from harvester.cli import review as review_cli
from harvester.cli._review_web import ReviewServer
from harvester.config import load_config
from tests.builders.agents import case
from tests.builders.browser import open_page
from tests.builders.project import cli, enter_project
from tests.builders.report import HOSTILE

TRACES = sorted((Path(__file__).resolve().parents[1] / "traces" / "example").glob("*.json"))
ACCEPTED = ["order-a1002", "ceos-favourite-colour"]
EDITED = "return-order-a1001-refund-policy"
REJECTED = "sell-gift-cards"
WHY = "a blocked refund is the agent working"


@pytest.fixture
def cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example traces harvested one case per failure cluster, then the rest; and a hostile case."""
    enter_project(tmp_path, monkeypatch)
    assert cli("ingest", *map(str, TRACES)).exit_code == 0
    assert cli("harvest", "--by-cluster").exit_code == 0 and cli("harvest").exit_code == 0
    hostile = case("hostile", status="pending", prompt=HOSTILE[1], recorded={"answer": HOSTILE[0], "stop": "answered"})
    save_case(hostile, tmp_path / "cases" / "pending")
    return tmp_path / "cases"


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """One time for every label, on the page and on the terminal: a label records when it was made."""
    for module in (review_cli, review_web):
        monkeypatch.setattr(module, "now", lambda: "2026-12-05T01:00:00+00:00")


@pytest.fixture
def server(cases: Path) -> Iterator[ReviewServer]:
    served = ReviewServer(CaseFolder.for_project(load_config(), cases))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.json"))}


def _decided_in_the_terminal(cases: Path) -> dict[str, bytes]:
    """The same decisions on a copy of the folder, made as a reviewer at the terminal makes them."""
    copy = cases.parent / "terminal"
    shutil.copytree(cases, copy)
    edits = "e\ntags\ntypical, policy\ne\ntrajectory\nstrict\n\nl\nb\nno policy quoted\ns\n"  # args: Enter keeps it
    assert CliRunner().invoke(main, ["review", EDITED, "--cases", str(copy)], input=edits).exit_code == 0
    assert cli("accept", *ACCEPTED, "--cases", str(copy)).exit_code == 0
    assert cli("reject", REJECTED, "--why", WHY, "--cases", str(copy)).exit_code == 0
    return _files(copy)


def test_a_reviewer_decides_on_the_page_as_at_the_terminal(browser, cases, server):
    expected = _decided_in_the_terminal(cases)
    edited_file = expected[f"pending/{EDITED}.json"]
    assert b'"mode": "strict"' in edited_file and b'"policy"' in edited_file  # the terminal made the edits
    assert b'"verdict": "bad"' in edited_file
    page, errors = open_page(browser, server.url)
    assert page.title().startswith("harvester review")
    clusters = page.eval_on_selector_all("section[data-cluster]", "els => els.map(e => e.dataset.cluster)")
    assert len(clusters) == 3 and clusters[-1] == ""  # the two failure clusters, then the cases of no cluster
    shown = page.eval_on_selector_all("[data-case-id]", "els => els.map(e => e.dataset.caseId)")
    assert sorted(shown) == sorted([*ACCEPTED, EDITED, REJECTED, "order-a1003", "hostile"])
    first_fixture = page.locator(f'[data-case-id="{REJECTED}"] details.fx').first
    assert "B)" in first_fixture.locator("summary").inner_text() and not first_fixture.locator("pre").is_visible()
    first_fixture.locator("summary").click()  # collapsible: opened on demand
    assert first_fixture.locator("pre").is_visible()

    for case_id in ACCEPTED:
        page.locator(f'[data-case-id="{case_id}"] button[name=accept]').click()
        assert page.inner_text("#notice").startswith(f"accepted {case_id} -> ")
    edited = f'[data-case-id="{EDITED}"]'
    page.locator(f"{edited} details.edit summary").click()
    page.locator(f"{edited} form[data-field=tags] input[name=answer]").fill("typical, policy")
    page.locator(f"{edited} form[data-field=tags] button").click()
    assert page.inner_text("#notice") == f"{EDITED}: tags saved"
    page.locator(f"{edited} details.edit summary").click()
    page.locator(f"{edited} form[data-field=trajectory] select").first.select_option("strict")
    page.locator(f"{edited} form[data-field=trajectory] button").click()
    page.locator(f"{edited} form.label select").select_option("bad")
    page.locator(f"{edited} form.label input[name=reason]").fill("no policy quoted")
    page.locator(f"{edited} form.label button").click()
    assert page.inner_text("#notice") == f"{EDITED}: answer labelled bad (1 label(s) on this case)"
    assert page.locator(f'{edited} ul.labels li[data-label="bad"]').inner_text() == "bad: no policy quoted"
    page.locator(f'[data-case-id="{REJECTED}"] input[name=why]').fill(WHY)
    page.locator(f'[data-case-id="{REJECTED}"] button[name=reject]').click()
    assert page.inner_text("#notice").startswith(f"rejected {REJECTED} -> ")

    before = _files(cases)
    page.locator(f"{edited} details.edit summary").click()
    page.locator(f"{edited} form[data-field=min_steps] input[name=answer]").fill("-3")
    page.locator(f"{edited} form[data-field=min_steps] button").click()
    assert page.inner_text("#error").startswith(f"not changed: {EDITED}: min_steps") and _files(cases) == before

    hostile = page.locator('[data-case-id="hostile"]')
    assert hostile.locator("pre.prompt").inner_text() == HOSTILE[1]
    assert hostile.locator("pre.answer").inner_text() == HOSTILE[0]
    assert page.evaluate("window.pwned") is None and page.evaluate("document.images.length") == 0
    assert sorted(page.eval_on_selector_all("[data-case-id]", "els => els.map(e => e.dataset.caseId)")) == sorted(
        [EDITED, "order-a1003", "hostile"]
    )
    assert [e for e in errors if "422" not in e] == []  # the refused edit's page comes with its status
    page.close()

    assert _files(cases) == expected
