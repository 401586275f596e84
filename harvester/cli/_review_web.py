"""``harvester review --web``: the review page (``_review_page``) served on 127.0.0.1 to one reviewer.

Only the loopback address is bound, and every request must carry the random token the command prints
once in the page's URL (``/TOKEN/``): anything else gets 403, so another user of the machine, or a web
page the reviewer opens that guesses the port, can neither read cases nor decide on them. Each decision
is one call of the review actions in ``harvester.case`` (``accept_cases``, ``reject_cases``,
``field_update`` then ``edit_case``, ``label_answer``), with the page's form answering the questions the terminal asks,
so a case decided here is the same bytes as one decided in ``harvester review``; a refusal is shown on
the page (422) and nothing changes. Decisions are made one at a time (a lock), as on the terminal.
"""

from __future__ import annotations

import hmac
import secrets
import signal
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote

from ..case import CaseFolder, Decisions, accept_cases, edit_case, field_update, label_answer, reject_cases
from ..checks import Ask
from ..errors import HarvesterError, InputError
from ._review_page import page
from .judging import now

__all__ = ["HOST", "ReviewServer", "answering", "serve_review"]

HOST = "127.0.0.1"
MAX_FORM_BYTES = 1 << 20
DRAIN_BYTES = 16 << 20  # a bigger form than the limit is read past (and dropped) up to this, then cut off
# The page loads nothing and runs no script: even a string that escaped its escaping could not act.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the URL holds the token
    "Cache-Control": "no-store",
}


def answering(answers: Sequence[str]) -> Ask:
    """The ``Ask`` a form answers: its answers in the order the questions come, an empty one taking the
    default (Enter on the terminal), one outside the choices refused as the terminal refuses it."""
    given = iter(answers)

    def ask(question: str, default: str, choices: Sequence[str] = ()) -> str:
        answer = next(given, "") or default
        if choices and answer not in choices:
            raise ValueError(f"{answer!r} is not one of {', '.join(choices)} ({question})")
        return answer

    return ask


class ReviewServer(ThreadingHTTPServer):
    """The page and its decisions for ``folder``, on 127.0.0.1 (``port`` 0: a free one)."""

    daemon_threads = True

    def __init__(
        self, folder: CaseFolder, *, port: int = 0, force: bool = False, default_judge: str | None = None
    ) -> None:
        self.folder = folder
        self.force = force  # review --force: accept a case a redaction rule still matches
        self.default_judge = default_judge  # the config's: what setting expected gives a case naming no judge
        self.token = secrets.token_urlsafe(24)
        self.lock = threading.Lock()
        self.notice: str | None = None  # what the last decision did, shown once
        self.counts = {"accepted": 0, "rejected": 0, "edited": 0, "labelled": 0}
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/{self.token}/"

    def decide(self, case_id: str, verb: str, form: dict[str, list[str]]) -> str:
        """One decision through the review actions; what it did, or a ``HarvesterError``/``ValueError``."""
        folder = self.folder
        if verb == "accept":
            done = _one(accept_cases(folder, [case_id], force=self.force))
            self.counts["accepted"] += 1
            return f"accepted {case_id} -> {done}; then: harvester suite bump"
        if verb == "reject":
            why = (form.get("why") or [""])[0].strip()
            if not why:
                raise InputError("say why the case is rejected", field="why")
            done = _one(reject_cases(folder, [case_id], why))
            self.counts["rejected"] += 1
            return f"rejected {case_id} -> {done}"
        if verb == "edit":
            name = (form.get("field") or [""])[0]
            case = folder.load(case_id)
            update = field_update(case, name, answering(form.get("answer", [])), default_judge=self.default_judge)
            edit_case(folder, case, update)
            self.counts["edited"] += 1
            return f"{case_id}: {name} saved"
        if verb == "label":
            verdict, reason = ((form.get(key) or [""])[0] for key in ("verdict", "reason"))
            case = label_answer(folder, folder.load(case_id), verdict, reason, at=now())
            self.counts["labelled"] += 1
            return f"{case_id}: answer labelled {verdict} ({len(case.labels)} label(s) on this case)"
        raise InputError(f"no such decision: {verb!r} (accept, reject, edit, label)")


def _one(decisions: Decisions) -> str:
    """The file of a one-case decision, or its refusal as an error."""
    if decisions.refused:
        raise InputError(next(iter(decisions.refused.values())))
    if decisions.unknown:
        raise InputError(f"no case {decisions.unknown[0]!r}")
    return str(next(iter(decisions.done.values())))


class _Handler(BaseHTTPRequestHandler):
    server: ReviewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the terminal shows the URL and the summary, not every request."""

    def _route(self) -> list[str] | None:
        """The path after the token, split; None (403 sent) when the token is missing or wrong."""
        parts = self.path.split("?", 1)[0].split("/")
        if len(parts) < 2 or not hmac.compare_digest(parts[1].encode(), self.server.token.encode()):
            self._send(403, "forbidden: open the review page with the URL harvester review --web printed\n", "plain")
            return None
        return [unquote(p) for p in parts[2:]]

    def do_GET(self) -> None:
        route = self._route()
        if route is None:
            return
        if route != [""]:
            self._send(404, "not found\n", "plain")
            return
        with self.server.lock:
            notice, self.server.notice = self.server.notice, None
            body = page(self.server.folder, notice=notice)
        self._send(200, body)

    def do_POST(self) -> None:
        route = self._route()
        if route is None:
            return
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit():
            self._send(400, "bad Content-Length\n", "plain", close=True)
            return
        if int(length) > MAX_FORM_BYTES:
            self._drain(int(length))
            self._send(413, "form too large\n", "plain", close=True)
            return
        form = parse_qs(self.rfile.read(int(length)).decode("utf-8", "replace"), keep_blank_values=True)
        if len(route) != 3 or route[0] != "case":
            self._send(404, "not found\n", "plain")
            return
        case_id, verb = route[1], route[2]
        with self.server.lock:
            try:
                self.server.notice = self.server.decide(case_id, verb, form)
            except (HarvesterError, ValueError) as exc:
                self._send(422, page(self.server.folder, error=f"{case_id}: {exc}"))
                return
        self.send_response(303)
        self.send_header("Location", f"/{self.server.token}/#case-{quote(case_id, safe='')}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _drain(self, length: int) -> None:
        """Read and drop a too-large body (up to a bound, a chunk at a time, never kept), so the client,
        still sending, reads the 413 rather than a reset connection."""
        left = min(length, DRAIN_BYTES)
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                return
            left -= len(chunk)

    def _send(self, code: int, body: str, kind: str = "html", *, close: bool = False) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", f"text/{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in _HEADERS.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)


def serve_review(
    folder: CaseFolder, *, port: int, force: bool, default_judge: str | None, echo: Callable[[str], None]
) -> dict[str, int]:
    """Serve the page until Ctrl-C or SIGTERM; its URL (with the token) is echoed once. What was decided."""
    try:
        server = ReviewServer(folder, port=port, force=force, default_judge=default_judge)
    except OSError as exc:
        raise InputError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}", field="port") from None
    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    thread = threading.Thread(target=server.serve_forever, name="harvester-review-web", daemon=True)
    thread.start()
    try:
        echo(f"review page: {server.url}  (Ctrl-C stops it)")
        try:
            while not done.wait(1.0):  # a timeout, so Ctrl-C is delivered on every platform
                pass
        except KeyboardInterrupt:
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.shutdown()
        server.server_close()
    return server.counts
