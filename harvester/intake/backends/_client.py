"""``Client``: JSON over HTTP to one backend, every failure one line a user can act on.

The standard library's ``urllib`` is enough for a few GETs and POSTs per trace; what matters is the
errors. A backend that is down, refuses the credentials, rate-limits, or answers with something that
is not JSON each gives one ``BackendError`` naming the backend, the request and the fix (which
environment variable to set), and the status it answered with, so a reader can turn a 404 for a trace
id into "this backend does not hold that trace". The credentials go in headers, never in the message:

- a redirect is followed only within the backend's origin (scheme, host and port): ``urllib`` would
  send every header, the credentials too, wherever a redirect points, plain http included;
- a credential an HTTP header cannot carry (a newline) is an ``InputError`` naming its variable;
- each request has an overall deadline (``timeout``), not only one per read: a backend trickling its
  answer a byte at a time is given up on; what an error answer's body says is shown cut to one short,
  printable, redacted line;
- the pull as a whole has a deadline, and each answer a cap on its bytes and on the JSON values
  parsing it builds (``Limits``, ``_limits``), checked before it is parsed.

``Client.answers()`` wraps the reading of an answer: one whose JSON is not of the shape the backend
answers (a list for an object, a field missing) is one ``BackendError`` naming the request.
"""

from __future__ import annotations

import functools
import http.client
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any
from urllib.parse import urlencode, urlsplit

import orjson

from ...errors import BackendError, InputError, NotFoundError
from ._backend import Target
from ._limits import Limits, Pages, json_values

__all__ = ["SHAPE_ERRORS", "Client", "check_header", "credential", "one_line"]

RETRY_AFTER_MAX_S = 5.0  # a short rate limit is waited out (twice at most); a longer one is reported
DETAIL_CHARS = 80  # of an error answer's body, in the message
SHAPE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError)
_CHUNK = 1 << 16
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name
_JSON_NAMES = {"list": "a list", "str": "a string", "int": "a number", "float": "a number", "bool": "a boolean",
               "NoneType": "null", "dict": "an object"}  # fmt: skip


def credential(variable: str) -> str:
    """The environment variable ``variable``, stripped, checked to fit in an HTTP header."""
    value = os.environ.get(variable, "").strip()
    check_header(value, variable)
    return value


def check_header(value: str, source: str, *, name: bool = False) -> None:
    """``InputError`` naming ``source`` (never the value) when ``value`` cannot go in a header (a newline
    would end the header and start another); ``name``: it is a header's name."""
    bad = not _TOKEN.fullmatch(value) if name else any(_unsendable(c) for c in value)
    if bad:
        what = "a header name" if name else "a control character (a newline?) or a character HTTP headers cannot carry"
        raise InputError(f"holds {what}; set it again", field=source)


def _unsendable(c: str) -> bool:
    return (ord(c) < 32 and c != "\t") or 127 <= ord(c) < 160 or ord(c) > 255


def one_line(text: str, limit: int = DETAIL_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters (control characters, newlines
    and terminal escapes become spaces)."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.cache
def _redactor() -> Any:
    from ...redact import Redactor

    return Redactor(key="")


def _detail(raw: bytes, limit: int = DETAIL_CHARS) -> str:
    """What a backend's answer says, to show: redacted (it may echo a token), then one short line."""
    return one_line(_redactor().redact_text(raw.decode("utf-8", "replace")), limit)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _Redirected(Exception):
    def __init__(self, code: int, url: str) -> None:
        super().__init__(code, url)
        self.code, self.url = code, url


class _TooSlow(Exception):
    pass


class _SameOrigin(urllib.request.HTTPRedirectHandler):
    """A redirect within the backend's origin is followed; one elsewhere is refused (``urllib`` would
    re-send every header, the credentials too, to any host it points at)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            raise _Redirected(code, newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_SameOrigin())  # urlopen's handlers (proxies from the environment too)


class Client:
    def __init__(
        self,
        target: Target,
        *,
        headers: Mapping[str, str] | None = None,
        credentials: str = "",
        timeout: float = 30.0,
        limits: Limits | None = None,
    ) -> None:
        """``credentials``: the environment variables that would have authorized us, for the 401 line;
        ``limits``: the pull's deadline (from now) and caps."""
        self.target = target
        self.limits = limits or Limits()
        self.ends = time.monotonic() + self.limits.deadline
        self.sent = 0  # requests, for the deadline's line
        self.headers = {"Accept": "application/json", "User-Agent": "harvester", **(headers or {})}
        self.credentials = credentials
        self.timeout = timeout
        self.last = str(target)  # the request last sent, for a message about its answer
        source = f"the headers from {credentials}" if credentials else "the headers"
        for name, value in self.headers.items():
            check_header(name, source, name=True)
            check_header(value, f"{source} ({name})")

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def get_object(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``get``, for an answer that is a JSON object (``{}`` for an empty one)."""
        return self.object(self.get(path, params))

    def post_object(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self.object(self.post(path, body, params))

    def get_trace(self, path: str, trace_id: str) -> Any:
        """``get(path)`` for one trace: a 404 is ``NotFoundError`` ("holds no trace ...")."""
        try:
            return self.get(path)
        except BackendError as exc:
            if exc.status == 404:
                raise NotFoundError(f"{self.target} holds no trace {trace_id!r}") from None
            raise

    def post(self, path: str, body: Any, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("POST", path, params=params, body=body)

    def pages(self, cursor: str, what: str = "") -> Pages:
        """A paged walk whose answers name the next page in ``cursor`` (``_limits.Pages``)."""
        return Pages(self, cursor, what)

    # -- the shape of an answer ------------------------------------------------------------------
    def wrong(self, detail: str) -> BackendError:
        """The error for an answer to the last request that is not of the shape the backend answers."""
        backend = self.target.backend
        return BackendError(f"{self.last}: the answer is not of the shape {backend} answers ({one_line(detail, 120)}); "
                            f"is this {backend}?")  # fmt: skip

    def object(self, answer: Any) -> dict[str, Any]:
        if answer is None:
            return {}
        if not isinstance(answer, dict):
            raise self.wrong(f"{_json_name(answer)} where an object was expected")
        return answer

    def items(self, answer: dict[str, Any], field: str, kind: type | None = None) -> list[Any]:
        """``answer[field]``, a list (``[]`` when absent or null) whose items are each a ``kind``."""
        value = answer.get(field)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.wrong(f"{field!r} is {_json_name(value)} where a list was expected")
        if kind is not None:
            for item in value:
                if not isinstance(item, kind):
                    raise self.wrong(f"{field!r} holds {_json_name(item)} where {_json_name(kind())} was expected")
        return value

    @contextmanager
    def answers(self) -> Iterator[None]:
        """Reading answers inside: one the code cannot read (``KeyError``, ``TypeError``...) is ``wrong``."""
        try:
            yield
        except SHAPE_ERRORS as exc:
            raise self.wrong(_shape(exc)) from None

    # -- one request -----------------------------------------------------------------------------
    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        """The decoded JSON answer to one request (``None`` for an empty body), or ``BackendError``."""
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        url = f"{self.target.base_url}{path}" + (f"?{query}" if query else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        what = self.last = f"{self.target}: {method} {path}"
        backend = self.target.backend
        for attempt in range(3):
            now = time.monotonic()
            if now >= self.ends:
                raise self._late()
            deadline = min(now + self.timeout, self.ends)
            self.sent += 1
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with _opener().open(req, timeout=deadline - now) as response:
                    raw = _read(response, deadline, self.limits.max_answer_bytes)
                break
            except _Redirected as exc:
                raise BackendError(
                    f"{what}: answered {exc.code}, a redirect to {_where(exc.url)}, another origin; harvester does "
                    f"not follow it (the credentials would go there): if the backend is there, use "
                    f"{_where(exc.url, backend)}",
                    status=exc.code,
                ) from None
            except _TooSlow:
                if time.monotonic() >= self.ends:
                    raise self._late() from None
                raise BackendError(
                    f"{what}: the answer took longer than {self.timeout:g} s; try again, or a longer --timeout"
                ) from None
            except urllib.error.HTTPError as exc:
                wait = _retry_after(exc)
                if exc.code == 429 and wait is not None and wait <= RETRY_AFTER_MAX_S and attempt < 2:
                    time.sleep(wait)
                    continue
                raise BackendError(f"{what}: {_explain(exc, wait, self.credentials)}", status=exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, socket.timeout | TimeoutError):
                    if time.monotonic() >= self.ends:
                        raise self._late() from None
                    reason = f"no answer within {self.timeout:g} s"
                elif isinstance(reason, OSError) and reason.strerror:
                    reason = reason.strerror.lower()
                reason = one_line(str(reason))
                raise BackendError(f"{what}: unreachable ({reason}); is the backend running there?") from None
            except http.client.InvalidURL:
                raise BackendError(f"{what}: the URL holds a character HTTP cannot carry") from None
            except http.client.HTTPException as exc:  # a status line that is not HTTP, a body cut short
                raise BackendError(
                    f"{what}: the answer is not HTTP or broke off ({type(exc).__name__}); is this {backend}?"
                ) from None
            except ValueError:  # http.client refuses a header it cannot send: never show its value
                raise BackendError(f"{what}: a request header holds a character HTTP cannot carry") from None
        limits = self.limits
        if len(raw) > limits.max_answer_bytes:
            raise BackendError(f"{what}: the answer is over the {limits.mib} cap; ask for less (--limit), "
                               "or raise import.max_answer_mib")  # fmt: skip
        if not raw.strip():
            return None
        if json_values(raw, limits.max_values) > limits.max_values:
            raise BackendError(f"{what}: the answer holds over {limits.max_values:,} JSON values, more than "
                               f"the {limits.mib} cap allows parsing; ask for less (--limit), or raise "
                               f"import.max_answer_mib")  # fmt: skip
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            head = _detail(bytes(raw[:200]), 60)
            raise BackendError(f"{what}: the answer is not JSON ({head!r}...); is this {backend}?") from None

    def _late(self) -> BackendError:
        """The pull is past its deadline: the line saying so, with how far it got."""
        return BackendError(f"{self.target} did not finish within the {self.limits.deadline:g} s deadline "
                            f"({self.sent:,} requests): narrow with --since or --limit, or raise --deadline "
                            "(import.deadline)")  # fmt: skip


def _read(response: Any, deadline: float, limit: int) -> bytearray:
    """The body (up to one byte past ``limit``), a read at a time, given up on past ``deadline``."""
    if time.monotonic() > deadline:
        raise _TooSlow
    raw = bytearray()
    while chunk := response.read1(_CHUNK):
        raw += chunk
        if len(raw) > limit:
            return raw
        if time.monotonic() > deadline:
            raise _TooSlow
    if getattr(response, "length", None):  # read1 ends quietly where the connection did
        raise http.client.IncompleteRead(bytes(raw), response.length)
    return raw


def _where(url: str, backend: str = "") -> str:
    """Where a redirect points, without its path, query or any user:password in it; with ``backend``,
    as the backend URL that names it."""
    scheme, host, port = _origin(url)
    host = f"[{host}]" if ":" in host else host
    if backend:
        scheme = backend + ("+https" if scheme == "https" else "")
    return one_line(f"{scheme}://{host}" + (f":{port}" if port else ""))


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value).__name__, type(value).__name__)


def _shape(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r}" if exc.args else "a field missing"
    if isinstance(exc, AttributeError) and (m := re.match(r"'(\w+)' object has no attribute", str(exc))):
        return f"{_JSON_NAMES.get(m[1], m[1])} where an object was expected"
    return str(exc) or type(exc).__name__


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    try:
        return max(0.0, float(exc.headers.get("Retry-After", "")))
    except (TypeError, ValueError):
        return None


def _explain(exc: urllib.error.HTTPError, wait: float | None, credentials: str) -> str:
    code = exc.code
    if code in (401, 403):
        fix = f"set {credentials}" if credentials else "this backend needs credentials harvester does not send"
        return f"{code} {'unauthorized' if code == 401 else 'forbidden'} ({fix})"
    if code == 429:
        return "429 rate limited" + (f" (retry after {wait:g} s)" if wait is not None else "; try again later")
    detail = ""
    try:
        fp: Any = exc.fp  # the response: read1 takes what has come, waiting once at most
        detail = _detail(getattr(fp, "read1", fp.read)(300)) if fp is not None else ""
    except (OSError, http.client.HTTPException):
        pass
    return f"{code} {one_line(str(exc.reason))}" + (f": {detail}" if detail else "")
