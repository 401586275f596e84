"""``Client``: JSON over HTTP to one backend, every failure one line a user can act on.

The standard library's ``urllib`` is enough for a few GETs and POSTs per trace; what matters is the
errors. A backend that is down, refuses the credentials, rate-limits, or answers with something that
is not JSON each gives one ``BackendError`` naming the backend, the request and the fix (which
environment variable to set), and the status it answered with, so a reader can turn a 404 for a trace
id into "this backend does not hold that trace". The credentials go in headers, never in the message.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import orjson

from ...errors import BackendError, NotFoundError
from ._target import Target

__all__ = ["MAX_RESPONSE_BYTES", "Client"]

MAX_RESPONSE_BYTES = 512 << 20  # one response; a trace past this is paged, or it is not an agent's
RETRY_AFTER_MAX_S = 5.0  # a short rate limit is waited out (twice at most); a longer one is reported


class Client:
    def __init__(
        self, target: Target, *, headers: Mapping[str, str] | None = None, credentials: str = "", timeout: float = 30.0
    ) -> None:
        """``credentials``: the environment variables that would have authorized us, for the 401 line."""
        self.target = target
        self.headers = {"Accept": "application/json", "User-Agent": "harvester", **(headers or {})}
        self.credentials = credentials
        self.timeout = timeout

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

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

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: Any = None) -> Any:
        """The decoded JSON answer to one request (``None`` for an empty body), or ``BackendError``."""
        query = urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        url = f"{self.target.base_url}{path}" + (f"?{query}" if query else "")
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        what = f"{self.target}: {method} {path}"
        for attempt in range(3):
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, data=data, headers=headers, method=method), timeout=self.timeout
                ) as response:
                    raw = response.read(MAX_RESPONSE_BYTES + 1)
                break
            except urllib.error.HTTPError as exc:
                wait = _retry_after(exc)
                if exc.code == 429 and wait is not None and wait <= RETRY_AFTER_MAX_S and attempt < 2:
                    time.sleep(wait)
                    continue
                raise BackendError(f"{what}: {_explain(exc, wait, self.credentials)}", status=exc.code) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, socket.timeout | TimeoutError):
                    reason = f"no answer within {self.timeout:g} s"
                elif isinstance(reason, OSError) and reason.strerror:
                    reason = reason.strerror.lower()
                raise BackendError(f"{what}: unreachable ({reason}); is the backend running there?") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise BackendError(f"{what}: the answer is over {MAX_RESPONSE_BYTES >> 20} MiB; ask for less (--limit)")
        if not raw.strip():
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            head = raw[:60].decode("utf-8", "replace").strip()
            raise BackendError(
                f"{what}: the answer is not JSON ({head!r}...); is this {self.target.backend}?"
            ) from None


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
        detail = exc.read(300).decode("utf-8", "replace").strip().replace("\n", " ")
    except OSError:
        pass
    return f"{code} {exc.reason}" + (f": {detail[:200]}" if detail else "")
