"""An app whose refund tool posts to a payments service, and whose tool dispatch harvester does not
route: its own loop, a plain dict of functions, the tool span written by hand as a tracer's
``@tool`` decorator would. Only the seal stands between a replay and the payments service.

``LEAKY_URL`` is the payments service; ``LEAKY_CLIENT`` says how the tool reaches it (``httpx``,
``requests``, ``urllib``, ``socket``, ``connect-name`` / ``connect-bytes`` (a name given to ``connect``
itself), ``asyncio``, ``subprocess``, ``name`` for a host name that
does not resolve, ``thread`` for a worker thread started before any replay, ``fork`` for a forked
child, ``telemetry`` for a span exported to the service by the OpenTelemetry SDK instead). Less
common ways: ``own-env`` (a Python child given an environment of its own, as an MCP client gives its
server), ``gethostbyname`` (a lookup of the service's name, the query itself leaving), ``unix`` (a
local socket at ``LEAKY_UNIX``, its path a bytearray), ``mp-spawn`` / ``mp-forkserver`` (a
multiprocessing worker), ``mp-program`` (multiprocessing starting another program, ``env``),
``httpx-async``, ``suppressed`` (inside ``suppress_instrumentation()``), ``isolated`` (``python -I``),
``posix-spawn-env`` (a Python given its own environment by ``os.posix_spawn``), ``environ`` (``env=os.environ``),
``posix-spawn-environ`` (``os.posix_spawn`` given ``os.environ``), ``cleared-env``, ``posix-spawn-pythonpath``,
``pty`` and ``exporter`` (the ways round the seal a third round of testing tried), ``syslog`` (the
``syslog`` module, which reaches ``/dev/log`` from C), ``ctypes`` (the C library's ``connect`` and
``send`` called through ctypes: C code, no socket event; ``child-ctypes``: in a Python child),
``uvloop`` (a uvloop loop made directly with
``uvloop.run``: libuv connects in C), ``psycopg`` (a row written to the PostgreSQL database
``LEAKY_URL`` names, through libpq's own C code).
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import httpx
import requests
from opentelemetry import trace

import harvester

URL_ENV, CLIENT_ENV = "LEAKY_URL", "LEAKY_CLIENT"
_tracer = trace.get_tracer("leaky_app")


def _post(url: str, how: str) -> str:
    host, port = urlsplit(url).hostname or "", urlsplit(url).port or 80
    if how == "httpx":
        return httpx.post(url, json={"refund": "A1001"}, timeout=5).text
    if how == "requests":
        return requests.post(url, json={"refund": "A1001"}, timeout=5).text
    if how == "urllib":
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=5) as r:
            return r.read().decode()
    if how == "socket":
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
            return sock.recv(100).decode()
    if how in ("connect-name", "connect-bytes"):  # a name given to connect itself, as text or as bytes
        with socket.socket() as sock:
            sock.settimeout(5)
            sock.connect((host.encode() if how == "connect-bytes" else host, port))
            sock.sendall(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
            return sock.recv(100).decode()
    if how == "asyncio":
        return asyncio.run(_send(host, port))
    if how == "uvloop":  # a uvloop loop made directly, not by a policy: libuv connects in C
        import uvloop

        return uvloop.run(_send(host, port))
    if how == "subprocess":
        code = f"import urllib.request; urllib.request.urlopen({url!r}, data=b'{{}}', timeout=5)"
        return str(subprocess.run([sys.executable, "-c", code], check=True, timeout=30).returncode)
    if how == "name":
        return httpx.post("https://api.payments.invalid/v1/refunds", timeout=5).text
    if how == "thread":
        _jobs.put(url)
        return _done.get(timeout=10)
    if how == "fork":
        return _in_child(url)
    return _less_common(url, how)


def _less_common(url: str, how: str) -> str:
    code = f"import urllib.request; urllib.request.urlopen({url!r}, data=b'{{}}', timeout=5)"
    if how == "httpx-async":  # as AsyncOpenAI, pydantic-ai and anyio look a name up: in bytes
        return asyncio.run(_post_async(url))
    if how == "suppressed":  # instrumentation suppressed is still the agent's code
        from opentelemetry.instrumentation.utils import suppress_instrumentation

        with suppress_instrumentation():
            return _post(url, "urllib")
    if how == "isolated":  # a Python that ignores PYTHONPATH and the environment
        return str(subprocess.run([sys.executable, "-I", "-c", code], check=True, timeout=30).returncode)
    if how == "posix-spawn-env":  # os.posix_spawn reads its environment before its audited event
        env = {"PATH": os.environ.get("PATH", "")}
        return str(os.waitpid(os.posix_spawn(sys.executable, [sys.executable, "-c", code], env), 0)[1])
    if how == "cleared-env":  # the seal's variables gone from os.environ (a test's patch.dict, say)
        from unittest import mock

        with mock.patch.dict(os.environ, {"PATH": os.environ.get("PATH", "")}, clear=True):
            return str(subprocess.run([sys.executable, "-c", code], check=True, timeout=30).returncode)
    if how == "posix-spawn-pythonpath":  # the seal's setting kept, its sitecustomize taken off the path
        env = {**os.environ, "PYTHONPATH": "/nowhere"}
        return str(os.waitpid(os.posix_spawn(sys.executable, [sys.executable, "-c", code], env), 0)[1])
    if how == "pty":  # a child forked on a pseudo-terminal (pty.fork, pty.spawn)
        import pty

        pid, fd = pty.fork()
        if pid == 0:
            try:
                _post(url, "urllib")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        os.close(fd)
        return "forked"
    if how == "exporter":  # the agent calling an OpenTelemetry exporter itself, instrumentation suppressed
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.utils import suppress_instrumentation

        with suppress_instrumentation():
            return str(OTLPSpanExporter(endpoint=url, timeout=1).export([]))
    if how == "posix-spawn-environ":
        return str(os.waitpid(os.posix_spawn(sys.executable, [sys.executable, "-c", code], os.environ), 0)[1])
    if how == "environ":  # the process's own environment, given explicitly
        return str(subprocess.run([sys.executable, "-c", code], env=os.environ, check=True, timeout=30).returncode)
    if how == "own-env":  # the environment the MCP client gives a stdio server it starts
        from mcp.client.stdio import get_default_environment

        env = get_default_environment()
        return str(subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30).returncode)
    if how == "syslog":  # the local syslog daemon, reached from C with no socket event
        import syslog

        syslog.openlog("leaky_app", syslog.LOG_NDELAY)
        syslog.syslog(syslog.LOG_WARNING, "refund A1001")
        return "logged"
    if how == "psycopg":  # a database write through libpq, which connects from its own C code
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute("INSERT INTO refunds (order_id) VALUES ('A1001')")
        return "written"
    if how == "child-ctypes":  # a Python child whose C code connects (an MCP server's libpq, say)
        child = f"from tests.apps.leaky_app import _libc_post; print(_libc_post({url!r}))"
        return subprocess.run(
            [sys.executable, "-c", child], check=True, timeout=30, capture_output=True
        ).stdout.decode()
    if how == "ctypes":  # libc's connect and send called through ctypes: C code, no socket event
        return _libc_post(url)
    if how == "gethostbyname":
        return socket.gethostbyname("payments.internal.example")
    if how == "unix":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(bytearray(os.environ["LEAKY_UNIX"].encode()))
            sock.sendall(b"refund A1001")
            return "sent"
    if how.startswith("mp-"):
        import multiprocessing
        import multiprocessing.util

        if how == "mp-program":  # another program, started the way multiprocessing starts its own
            env = shutil.which("env") or "/usr/bin/env"
            pid = multiprocessing.util.spawnv_passfds(env, [env, sys.executable, "-c", code], ())
            return str(os.waitpid(pid, 0)[1])
        worker = multiprocessing.get_context(how[3:]).Process(target=_post, args=(url, "urllib"))
        worker.start()
        worker.join(30)
        return f"worker exited {worker.exitcode}"
    raise ValueError(how)


def _libc_post(url: str) -> str:
    """POST to ``url`` (an IPv4 address) with the C library's own socket calls, through ctypes."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    parts = urlsplit(url)
    address = struct.pack("=H", socket.AF_INET) + struct.pack("!H", parts.port or 80)
    address += socket.inet_aton(parts.hostname or "") + bytes(8)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    try:
        if libc.connect(fd, address, len(address)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
        request = b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n"
        libc.send(fd, request, len(request), 0)
        answer = ctypes.create_string_buffer(100)
        return answer.raw[: max(libc.recv(fd, answer, 100, 0), 0)].decode()
    finally:
        libc.close(fd)


async def _send(host: str, port: int) -> str:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /refund HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    data = await reader.read(100)
    writer.close()
    return data.decode()


async def _post_async(url: str) -> str:
    async with httpx.AsyncClient(timeout=5) as client:
        return (await client.post(url, json={"refund": "A1001"})).text


def _in_child(url: str) -> str:
    """Post from a forked child (which inherits the replay's seal with the process): what the child saw."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened and leave without running anything else
        os.close(read)
        try:
            said = f"sent {_post(url, 'urllib')}"
        except OSError as exc:
            said = f"{type(exc).__name__}: {exc}"
        os.write(write, said.encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    if not said.startswith("sent"):
        raise ConnectionError(said)
    return said


_jobs: queue.SimpleQueue[str] = queue.SimpleQueue()
_done: queue.SimpleQueue[str] = queue.SimpleQueue()


def _worker() -> None:
    """A worker thread the app starts at import: work it does has no case's context."""
    while True:
        url = _jobs.get()
        try:
            _done.put(_post(url, "urllib"))
        except OSError as exc:
            _done.put(f"failed: {type(exc).__name__}: {exc}")


threading.Thread(target=_worker, name="payments-worker", daemon=True).start()


def issue_refund(order_id: str) -> str:
    """The live tool: it moves money."""
    return _post(os.environ[URL_ENV], os.environ.get(CLIENT_ENV, "httpx"))


def build() -> Any:
    """``--agent tests.apps.leaky_app:build``: the model always asks for a refund; the app's loop runs it."""

    def agent(prompt: str) -> str:
        with harvester.agent_run("refunds", prompt, model="gpt-4.1-mini") as run:
            args = {"order_id": "A1001"}
            run.model_call("gpt-4.1-mini", tool_calls=[{"name": "issue_refund", "arguments": args}])
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "issue_refund"}
            with _tracer.start_as_current_span("execute_tool issue_refund", attributes=attributes):
                try:
                    result = issue_refund(**args)
                except Exception as exc:  # a client's own error type (httpx.ConnectError is not an OSError)
                    result = f"refund failed: {type(exc).__name__}: {exc}"
            answer = f"Refund: {result}"
            run.model_call("gpt-4.1-mini", text=answer)
            run.finish(answer)
        return answer

    return agent
