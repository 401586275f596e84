"""An app that starts work when it is imported, as a metrics client or a worker pool does: ``STARTS``
says which. ``thread``: a thread that tries to connect to the payments service (``LEAKY_URL``) every
millisecond and, once connected, posts on that connection; ``pool``: a multiprocessing pool (its start
method in ``STARTS_METHOD``) whose worker the tool asks to post; unset, nothing (``post`` is what a
test's own pool asks its workers to do); ``log``: a logging handler that posts urllib3's records to
the service (harvester's own OTLP export, after the replay, logs through urllib3). ``harvester replay``
imports it sealed: none may find a moment, between the import and the replay or after it, or a place,
a worker sealed by the import, where what they send is not checked."""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

STARTS, METHOD = "STARTS", "STARTS_METHOD"


def post() -> str:
    where = urlsplit(os.environ["LEAKY_URL"])
    with socket.create_connection((where.hostname or "", where.port or 80), timeout=5) as sock:
        sock.sendall(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        return sock.recv(100).decode(errors="replace")


def _keep_trying() -> None:
    while True:
        try:
            post()
        except OSError:
            time.sleep(0.001)


_pool = None
if multiprocessing.parent_process() is not None:
    pass  # a worker of the pool, importing this module for ``post``
elif os.environ.get(STARTS) == "thread":
    threading.Thread(target=_keep_trying, daemon=True).start()
elif os.environ.get(STARTS) == "log":  # ships urllib3's debug records to the payments service over HTTP
    _where = urlsplit(os.environ["LEAKY_URL"])
    _logs = logging.getLogger("urllib3")
    _logs.setLevel(logging.DEBUG)
    _logs.addHandler(logging.handlers.HTTPHandler(_where.netloc, "/refund", method="POST"))
elif os.environ.get(STARTS) == "pool":
    _pool = multiprocessing.get_context(os.environ.get(METHOD, "spawn")).Pool(1)


def build() -> Any:
    def agent(prompt: str) -> str:
        if _pool is not None:
            return "Refund: " + _pool.apply(post)
        time.sleep(0.2)  # the thread tries on, now inside the case
        return "Refund: queued"

    return agent
