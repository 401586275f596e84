"""The review page's server (``harvester review --web``) without a browser: it binds 127.0.0.1 only, a
request without its token is refused (403) and reads or changes nothing, and a decision the review
actions refuse (a field edit the terminal refuses, a broken or leaky case to accept, a rejection with no
reason) is a 422 page naming it, every file unchanged."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from harvester.case import CaseFolder, save_case
from harvester.cli._review_web import HOST, ReviewServer
from tests.builders.agents import case
from tests.builders.cli import one_line_error
from tests.builders.project import cli

API_KEY = "sk-proj-abcdefghijklmnopqrstuvwx1234"
TRAJECTORY = {"check": "trajectory_match", "reference": [{"name": "kb_search"}], "mode": "superset", "args": "ignore"}
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "cases"
    save_case(case("fine", status="pending", checks=[TRAJECTORY]), root / "pending")
    save_case(
        case("broken", status="pending", review_notes=["payloads were not captured: fill them in"]), root / "pending"
    )
    leaky = case("leaky", status="pending", recorded={"answer": f"key {API_KEY}", "trajectory": ["kb_search"]})
    save_case(leaky, root / "pending")
    return root


@pytest.fixture
def server(cases: Path) -> Iterator[ReviewServer]:
    served = ReviewServer(CaseFolder(cases))
    threading.Thread(target=served.serve_forever, daemon=True).start()
    yield served
    served.shutdown()
    served.server_close()


def _request(url: str, method: str = "GET", path: str = "", form: dict[str, object] | None = None):
    """(status, body) of one request to the server at ``url``, ``path`` relative to the URL's path."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    body = urlencode(form or {}, doseq=True)
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if method == "POST" else {}
    conn.request(method, path if path.startswith("/") else parts.path + path, body=body or None, headers=headers)
    response = conn.getresponse()
    out = response.status, response.read().decode()
    conn.close()
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.json"))}


def test_it_binds_the_loopback_address_only(server):
    assert server.server_address[0] == HOST == "127.0.0.1"
    assert urlsplit(server.url).hostname == "127.0.0.1" and len(urlsplit(server.url).path) > 30  # /TOKEN/


def test_a_request_without_its_token_is_403_and_changes_nothing(server, cases):
    before = _files(cases)
    token = server.token
    for path in ("/", "/favicon.ico", f"/{token[:-1]}/", f"/{token}x/", f"/?token={token}", f"/x/{token}/"):
        status, body = _request(server.url, path=path)
        assert status == 403 and "fine" not in body, path
    for path in ("/case/fine/accept", f"/{token[:-1]}/case/fine/accept", f"/x/{token}/case/fine/accept"):
        assert _request(server.url, "POST", path)[0] == 403
    assert _files(cases) == before
    status, body = _request(server.url)
    assert status == 200 and 'data-case-id="fine"' in body


def test_an_edit_the_terminal_refuses_is_an_error_on_the_page_and_changes_nothing(server, cases):
    before = _files(cases)
    refused = [
        ({"field": "min_steps", "answer": "-3"}, "fine: min_steps"),
        ({"field": "trajectory", "answer": ["sideways", "exact"]}, "fine: 'sideways' is not one of strict"),
        ({"field": "status", "answer": "accepted"}, "fine: 'status' is not a field review edits"),
        ({"field": "max_cost", "answer": "cheap"}, "fine: max_cost"),
    ]
    for form, error in refused:
        status, body = _request(server.url, "POST", "case/fine/edit", form)
        assert status == 422 and f"<p id=error role=alert>not changed: {error}" in body, form
    status, body = _request(server.url, "POST", "case/nope/edit", {"field": "why", "answer": "x"})
    assert status == 422 and "not changed: nope: no case 'nope'" in body
    assert _files(cases) == before
    # the same field, answered as the terminal accepts it, is saved
    assert _request(server.url, "POST", "case/fine/edit", {"field": "trajectory", "answer": ["strict", ""]})[0] == 303
    assert b'"mode": "strict"' in (cases / "pending" / "fine.json").read_bytes()


def test_accept_and_reject_keep_their_refusals(server, cases):
    before = _files(cases)
    status, body = _request(server.url)
    assert "data-secrets>a redaction rule still matches: recorded.answer" in body and API_KEY in body
    status, body = _request(server.url, "POST", "case/leaky/accept")
    assert status == 422 and "not changed: leaky: " in body and "still holds what a redaction rule matches" in body
    assert _request(server.url, "POST", "case/broken/accept")[0] == 422
    status, body = _request(server.url, "POST", "case/fine/reject", {"why": "  "})
    assert status == 422 and "say why the case is rejected" in body
    assert _request(server.url, "POST", "case/fine/reject", {"why": "x" * (1 << 20)})[0] == 413
    assert _files(cases) == before
    assert _request(server.url, "POST", "case/fine/reject", {"why": "duplicate"})[0] == 303
    status, body = _request(server.url)
    assert "<p id=notice role=status>rejected fine -&gt; " in body and 'data-case-id="fine"' not in body


def test_the_command_prints_its_url_once_and_stops_on_sigterm(cases):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harvester", "review", "--web", "--cases", str(cases)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("review page: http://127.0.0.1:") and line.rstrip().endswith("(Ctrl-C stops it)")
        url = line.split()[2]
        assert _request(url)[0] == 200 and _request(url, path="/")[0] == 403
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and err == ""
    assert out.splitlines() == ["reviewed: 0 accepted, 0 rejected, 0 edits, 0 labels"]  # the token is printed once


def test_bad_uses_of_the_command_are_one_line(cases, server):
    result = cli("review", "fine", "--web", "--cases", str(cases))
    assert result.exit_code == 2 and "leave out ID" in one_line_error(result)
    result = cli("review", "--web", "--port", str(server.server_address[1]), "--cases", str(cases))
    assert result.exit_code == 2 and "cannot listen on 127.0.0.1:" in one_line_error(result)
