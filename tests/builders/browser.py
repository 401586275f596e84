"""The machine's headless Chromium (Debian's, never a downloaded one) through playwright, for the tests
of the pages harvester makes (the HTML report, the review page): skipped where it is not installed,
unless ``HARVESTER_REQUIRE_BROWSER=1`` (CI) makes that a failure."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        reason = "chromium not installed (apt-get install chromium)"
        if os.environ.get("HARVESTER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason}; HARVESTER_REQUIRE_BROWSER=1 requires it")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, url: str):  # type: ignore[no-untyped-def]
    """A new page at ``url``, loaded; and the list its console errors, script errors and dialogs go to."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(url)
    page.wait_for_load_state("load")
    return page, errors
