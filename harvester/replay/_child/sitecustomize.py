"""Seals a Python process that a sealed replay started: the seal passes to the agent's children.

A sealed replay puts this folder first on ``PYTHONPATH`` and its policy in ``HARVESTER_SEAL``, so every
Python process the agent starts imports this module at startup (``site`` imports ``sitecustomize``).
It loads the seal's policy and checks by their paths (``_policy.py``, ``_starts.py``, ``_guard.py``:
standard library only, since the child may be another interpreter, without harvester) and installs the
same audit hook with the replay's policy. A refusal raises ``PermissionError`` in the child and is written as one JSON
line to the replay's log, which the replay reads into its report. The project's own
``sitecustomize``, if it has one, is imported after, as it would have been.
"""

from __future__ import annotations

import errno
import importlib
import importlib.machinery
import importlib.util
import json
import os
import socket
import sys
from typing import Any

try:
    import _posixsubprocess
except ImportError:  # pragma: no cover - Windows
    _posixsubprocess = None  # type: ignore[assignment]

__all__ = ["ENV"]

ENV = "HARVESTER_SEAL"


def _load(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _seal(setting: dict[str, Any]) -> None:
    policy_mod = _load("_harvester_seal_policy", os.path.join(setting["dir"], "_policy.py"))
    starts_mod = _load("_harvester_seal_starts", os.path.join(setting["dir"], "_starts.py"))  # _guard asks it
    starts_mod.Carried.carry(os.environ[ENV])  # for this child's own children
    guard_mod = _load("_harvester_seal_guard", os.path.join(setting["dir"], "_guard.py"))
    policy = policy_mod.Policy(setting.get("hosts", ()), setting.get("commands", ()))
    during = "process " + " ".join(getattr(sys, "orig_argv", sys.argv)[:4])[:80]

    log = _log(setting.get("log"))

    def refuse(what: str, target: str, why: str) -> None:
        said = {"what": what, "target": target, "why": why, "during": during, "seal": setting.get("seal")}
        if log is not None:
            try:
                os.write(log, (json.dumps(said) + "\n").encode())
            except OSError:
                pass  # the replay is gone: the refusal itself still stands
        raise PermissionError(errno.EACCES, f"harvester replay sealed {what} {target}: {why}")

    here = (policy, refuse)
    guard = guard_mod.Guard(lambda reaching: here)
    socket.getaddrinfo = guard.remembering(socket.getaddrinfo)  # type: ignore[assignment,unused-ignore]
    guard_mod.Guard.resolving(socket.socket)
    if _posixsubprocess is not None:
        _posixsubprocess.fork_exec = guard.forking(_posixsubprocess.fork_exec)
    guard.add()
    _seal_c_library(setting["dir"], guard, guard_mod, here)


def _seal_c_library(folder: str, guard: Any, guard_mod: Any, here: Any) -> None:
    """C code's own connections checked here too (``_libc.c``), where this interpreter can load the
    extension the replay's was built as (the same ABI: another Python goes on with its audit hook)."""
    import sysconfig

    path = os.path.join(folder, "_libc" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    if not os.path.exists(path) or os.environ.get("HARVESTER_SEAL_LIBC", "") == "0":
        return
    loader = importlib.machinery.ExtensionFileLoader("harvester.replay._libc", path)
    spec = importlib.util.spec_from_file_location("harvester.replay._libc", path, loader=loader)
    if spec is None:
        return
    libc = importlib.util.module_from_spec(spec)
    loader.exec_module(libc)
    if libc.SUPPORTED:
        libc.seal(guard.audit, [here], guard_mod.resolved, guard_mod.CSocket, guard_mod.MAX_RESOLVED)
        os.environ.setdefault("GRPC_DNS_RESOLVER", "native")


def _log(path: str | None) -> int | None:
    """The replay's log, opened once to append (this process may drop its privileges later); None when
    the replay removed it (it is gone: never made again). A log this process may not write to (a
    ``user=`` start where the log's folder is closed to that user) would lose its refusals, and the case
    would pass: it is a seal that cannot hold, and the child does not run."""
    if not path:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RuntimeError(f"cannot report its refusals to the replay's log {path}: {exc.strerror}") from None


def _then_the_projects_own() -> None:
    """Import the ``sitecustomize`` this one stands in front of, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    this = sys.modules.pop(__name__)
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as exc:
        if exc.name != "sitecustomize":
            raise
    finally:
        # this one stands in when the project has none: the import that is running this module ends by
        # taking it from sys.modules, and printed "Error in sitecustomize" (a KeyError) in every child
        sys.modules.setdefault(__name__, this)


_setting = os.environ.get(ENV)
if _setting:
    try:
        _seal(json.loads(_setting))
    except Exception as exc:  # never let a child run unsealed (an interpreter without audit hooks, a bad setting)
        sys.stderr.write(f"harvester: could not seal this process ({type(exc).__name__}: {exc}); exiting\n")
        sys.stderr.flush()
        os._exit(70)  # SystemExit while ``site`` imports this is a fatal error (exit 1, a traceback dump)
_then_the_projects_own()
