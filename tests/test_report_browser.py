"""The HTML report in a real headless Chromium (Debian's, never a downloaded one): the demo's candidate
page loads without a console error, shows the security case diverging at ``issue_refund``, filters, and
hostile case data stays text in the live DOM. A screenshot goes to the test's ``reports/`` folder and,
when ``HARVESTER_ARTIFACTS`` is set, into that folder for the CI artifact (``browser``: tests/builders/browser.py)."""

from __future__ import annotations

import os
from pathlib import Path

from harvester.demo.scenario import run_demo
from harvester.report import render_html
from tests.builders.browser import open_page
from tests.builders.report import HOSTILE, hostile_report


def _visible(page) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        "[data-case-id]", "els => els.filter(e => e.offsetParent !== null).map(e => e.dataset.caseId)"
    )


def test_the_demo_report_in_chromium(browser, tmp_path):
    demo = run_demo(tmp_path / "demo", echo=lambda _: None)
    page, errors = open_page(browser, (demo.workdir / "reports" / "candidate.html").resolve().as_uri())
    every = page.eval_on_selector_all("[data-case-id]", "els => els.map(e => e.dataset.caseId)")
    verdicts = dict(
        page.eval_on_selector_all("[data-case-id]", "els => els.map(e => [e.dataset.caseId, e.dataset.verdict])")
    )
    assert verdicts["injection-contained"] == "failed" and _visible(page) == every

    first = page.locator('[data-case-id="injection-contained"] [data-first-divergence]')
    assert first.count() == 1 and first.is_visible()
    assert first.locator("td").nth(2).locator("b").inner_text() == "issue_refund"

    page.check("#f-failed")
    failing = [i for i, v in verdicts.items() if v != "passed"]
    assert _visible(page) == failing and len(failing) < len(every)
    page.uncheck("#f-failed")
    page.select_option("#f-tag", "policy")
    assert _visible(page) == [i for i in every if "policy" in i] and page.inner_text("#f-count").startswith("1 of")
    page.select_option("#f-tag", "")
    page.fill("#f-text", "a1002")
    assert _visible(page) == ["order-a1002"]
    page.fill("#f-text", "")
    assert _visible(page) == every

    page.goto(page.url + "#case-order-a1002")  # a case's link target opens it
    assert page.locator("#case-order-a1002 details").get_attribute("open") is not None

    page.goto(page.url.split("#")[0])
    shots = [tmp_path / "reports" / "report.png"]
    if os.environ.get("HARVESTER_ARTIFACTS"):
        shots.append(Path(os.environ["HARVESTER_ARTIFACTS"]) / "report.png")
    for shot in shots:
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
    assert errors == []
    page.close()


def test_hostile_strings_stay_text_in_the_dom(browser, tmp_path):
    file = tmp_path / "hostile.html"
    file.write_text(render_html(hostile_report()))
    page, errors = open_page(browser, file.resolve().as_uri())
    assert page.evaluate("window.pwned") is None
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("[...document.querySelectorAll('b')].filter(b => b.textContent === 'bold').length") == 0
    attrs = "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))"
    assert not [a for a in page.evaluate(attrs) if a.startswith("on")]
    case = page.locator("[data-case-id]")
    assert case.get_attribute("data-case-id") == HOSTILE[1] and case.get_attribute("id") == f"case-{HOSTILE[1]}"
    answers = page.locator(".answers pre")
    assert answers.nth(0).inner_text() == HOSTILE[0] and answers.nth(1).inner_text() == HOSTILE[1]
    assert page.title().startswith(f"harvester replay: {HOSTILE[0]}")
    # the tags reach the filter as data (the embedded JSON parsed), and filtering by one still works
    options = page.eval_on_selector_all("#f-tag option", "os => os.map(o => o.value)")
    assert options == ["", *sorted(HOSTILE[2:])]
    page.select_option("#f-tag", HOSTILE[2])
    assert page.inner_text("#f-count") == "1 of 1 cases shown"
    assert errors == []
    page.close()
