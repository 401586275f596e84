"""What a sealed replay sets aside in its process while it runs, and puts back after.

- uvloop's event loop policy (``uvloop.install()``, at the app's import as uvloop's docs show): its loops
  connect in C, past every audit hook, so while sealed new event loops are the standard library's.
- multiprocessing's forkserver: one started before the replay forks its workers unsealed, and one started
  during it would stay sealed, with that replay's policy, after it. As the outermost seal begins and as it
  ends, the next process is made to come from a new one; the one running serves what it started.

Only the outermost of nested or concurrent seals (the agent's import sealed around its replay, two
replays in threads) puts back, as it ends; uvloop's policy is set aside by whichever begins after it
was installed (the replay's, when the import installed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator

__all__ = ["set_aside"]

_LOOPS_IN_C = ("uvloop", "winloop")  # event loops whose sockets are made and connected in C
_lock = threading.Lock()
_depth = 0
_policy: asyncio.AbstractEventLoopPolicy | None = None


@contextlib.contextmanager
def set_aside() -> Iterator[None]:
    global _depth, _policy
    with _lock:
        _depth += 1
        if _depth == 1:
            _fresh_forkserver()
        if _policy is None:  # also one installed inside an outer seal: the import of the replay's agent
            _policy = _policy_in_c()
            if _policy is not None:
                _set_policy(None)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _fresh_forkserver()
                if _policy is not None:
                    _set_policy(_policy)
                    _policy = None


def _policy_in_c() -> asyncio.AbstractEventLoopPolicy | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # policies are deprecated from Python 3.14
        current = asyncio.get_event_loop_policy()
    return current if type(current).__module__.split(".")[0] in _LOOPS_IN_C else None


def _set_policy(policy: asyncio.AbstractEventLoopPolicy | None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(policy)


def _fresh_forkserver() -> None:
    """Have the next process multiprocessing forks from a server come from a new one (sealed as the process
    is then). The one running is left to serve what it started: stopping it waits for every worker it
    forked, and a pool the app keeps open never ends (never importing multiprocessing otherwise)."""
    module = sys.modules.get("multiprocessing.forkserver")
    running = getattr(module, "_forkserver", None)
    if module is None or getattr(running, "_forkserver_pid", None) is None:
        return  # none started
    with contextlib.suppress(Exception):  # private names: gone or changed, the pool still works
        fresh = module.ForkServer()
        fresh._preload_modules = list(running._preload_modules)  # type: ignore[union-attr]
        module._forkserver = fresh  # type: ignore[attr-defined]
        for name in ("ensure_running", "get_inherited_fds", "connect_to_new_process", "set_forkserver_preload"):
            setattr(module, name, getattr(fresh, name))
