"""The seal's checks of the processes a replay's agent starts: which command it is, whether the process
will seal itself, and the environment that lets it.

Standard library only, importing nothing of harvester, like ``_guard`` (which asks it): a sealed Python
child loads both by their paths (``_child/sitecustomize.py``).

- A command line must begin with an allowed command; the standard library's own probes of the machine
  (``ctypes.util.find_library`` runs ldconfig and gcc, trio does at import) and harvester's capture
  process are not actions, and multiprocessing's workers of this very interpreter are the process itself.
- A Python child seals itself from its environment (``HARVESTER_SEAL``, ``_child`` first on
  ``PYTHONPATH``): one started with ``-I``, ``-E`` or ``-S``, or with a ``._pth`` file beside it, would
  not read it, one given an environment without it by ``os.execve``/``os.posix_spawn`` (which read it
  before their audited event) would not have it, and one given other site folders would run their
  ``.pth`` lines before it seals itself: all are refused. ``fork_exec`` (``subprocess``,
  multiprocessing) gets the seal added to an environment of the caller's own (``with_seal``, a new list).
- A shell's ``-c`` line is judged by its words; a shell whose environment makes it run more than the
  line (``BASH_ENV``, an exported function) is refused.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

try:  # in a sealed child (``_child``) the seal's modules are loaded by their paths
    from . import _policy
except ImportError:
    _policy = importlib.import_module("_harvester_seal_policy")

__all__ = [
    "BUILT",
    "CHILD_ENV",
    "Carried",
    "called_from",
    "first_on_path",
    "MP_UTIL",
    "SUBPROCESS",
    "fork_exec",
    "probing",
    "own_worker",
    "shell",
    "skips_site",
    "spawn",
    "sealed_environ",
    "with_seal",
]

Refuse = Callable[[str, str, str], None]  # (what, target, why): records the refusal, then raises
CHILD_ENV = "HARVESTER_SEAL"  # the policy a Python child of a sealed replay seals itself with (``_child``)
# Starts that are not the agent's actions: the standard library's probes of the machine (the programs they
# run, from their files: a private helper of theirs given another program is a start like any), and
# harvester's own capture process (an app that installs capture at import starts it; it writes to the trace
# store only), a Python run from its file.
_PROBES = frozenset(
    os.path.join(os.path.dirname(os.__file__), name) for name in ("ctypes/util.py", "platform.py", "uuid.py")
)
_PROBE_PROGRAMS = frozenset(
    (
        "ldconfig",
        "gcc",
        "cc",
        "ld",
        "objdump",
        "dump",
        "crle",
        "uname",
        "file",
        "ifconfig",
        "ip",
        "arp",
        "netstat",
        "lanscan",
    )
)
_CAPTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "intake", "_capture_process.py")
SUBPROCESS = os.path.join(os.path.dirname(os.__file__), "subprocess.py")
MP_UTIL = os.path.join(os.path.dirname(os.__file__), "multiprocessing", "util.py")


def own_worker(executables: Any, argv: Any) -> bool:
    """``fork_exec``'s program is this interpreter (multiprocessing's default executable), run so that it
    reads the seal's environment."""
    try:
        same = os.path.realpath(os.fsdecode(executables[0])) == os.path.realpath(sys.executable)
    except (TypeError, IndexError, ValueError):
        return False
    return same and not skips_site(argv)


def called_from(frame: Any, test: Callable[[str], bool], limit: int) -> bool:
    """``frame`` or one of the ``limit`` frames that called it runs code of a file ``test`` accepts."""
    for _ in range(limit):
        if frame is None:
            return False
        if test(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


def probing(words: list[str] | None) -> bool:
    """``words`` are one of the standard library's own probes of the machine, or harvester's capture
    process, started from its file (within 40 frames)."""
    if not words:
        return False
    if os.path.basename(words[0]) in _PROBE_PROGRAMS:
        return called_from(sys._getframe(3), _PROBES.__contains__, 40)
    return _is_python(words[0]) and called_from(sys._getframe(3), _CAPTURE.__eq__, 40)


BUILT = object()  # the environment is the one ``fork_exec`` gets, which the seal's wrapper gives the seal


def _start(
    policy: Any,
    refuse: Refuse,
    words: list[str] | None,
    shown: str,
    env: Any = BUILT,
    given: Any = None,
    startup: str | None = None,
) -> None:
    why = _refused(policy, words, env, given)
    if why is None and startup is not None:
        why = f"a shell line given {startup}, which makes the shell run more than the line: unset it for the replay"
    if why is None:
        return
    search = _search()
    if search is not None:
        saved = search.f_locals.get("saved_exc")
        if isinstance(saved, PermissionError) and str(saved).startswith("harvester replay sealed"):
            raise PermissionError(13, "refused again, found further on PATH")  # the first refusal is raised
        if words:
            shown = " ".join([_would_run(search, words[0]), *words[1:]])
    refuse("start", shown if len(shown) <= 120 else shown[:117] + "...", why)


def _refused(policy: Any, words: list[str] | None, env: Any, given: Any = None) -> str | None:
    """Why the seal refuses to start ``words`` (``env``, ``given``: as ``spawn`` takes them), or None."""
    if not policy.allows_command(words) and not probing(words):
        if words is not None or not policy.commands:  # with nothing allowed, what would allow it says more
            return "not in replay.allow_commands"
        return "a shell line that is not one plain command (a ';', '|', '&', '$', backquote or redirection)"
    if words and _is_python(words[0]):
        if skips_site(words):
            return "a Python run with -I, -E or -S skips the seal's environment: run it without"
        if env is not BUILT and not _has_seal(env):
            return "a Python given an environment without the seal's (HARVESTER_SEAL, PYTHONPATH)"
        if _isolated(words[0]):
            return "a Python with a ._pth file beside it runs isolated, skipping the seal's environment"
        moved = _moved_site(given if env is BUILT else env)
        if moved is not None:
            return f"a Python given another {moved} runs the .pth lines there before it seals itself"
    return None


# Where a Python child finds the site folders whose .pth lines it runs before ``sitecustomize`` seals it:
# as this process was started (a sealed child's: as its parent's seal let it start).
_SITE_HOMES = ("PYTHONHOME", "PYTHONUSERBASE", "PYTHONPLATLIBDIR")
_STARTED_WITH = {name: os.environ.get(name) for name in _SITE_HOMES}


def _moved_site(env: Any) -> str | None:
    """The variable of ``env`` (None: this process's) that points a Python child at other site folders than
    this process started with, or None."""
    variables = _variables(env)
    if variables is None:
        return _SITE_HOMES[0]  # an environment the seal cannot read: not one it can vouch for
    return next((name for name in _SITE_HOMES if variables.get(name) != _STARTED_WITH[name]), None)


def _variables(env: Any) -> dict[str, str] | None:
    """An environment given to a start, as text (None: this process's): a mapping (str or bytes keys) or
    fork_exec's ``b"NAME=value"`` entries; None when it is neither."""
    env = os.environb if env is None else env
    if isinstance(env, Mapping):
        pairs: Iterable[Any] = env.items()
    elif isinstance(env, (list, tuple)):
        pairs = (bytes(e).split(b"=", 1) for e in env if isinstance(e, (bytes, bytearray)) and b"=" in e)
    else:
        return None
    try:
        return {os.fsdecode(name): os.fsdecode(value) for name, value in pairs}
    except (TypeError, ValueError):
        return None


def _isolated(program: str) -> bool:
    """A ``._pth`` file beside the Python (``<program>._pth``, by the path it is run by or the file it
    is): CPython then runs isolated, reading neither ``PYTHONPATH`` nor ``site``."""
    found = shutil.which(program) or program
    return any(os.path.exists(path + "._pth") for path in {found, os.path.realpath(found)})


def spawn(policy: Any, refuse: Refuse, program: Any, argv: Any, env: Any = BUILT, given: Any = None) -> None:
    """``env``: the environment the program gets, where the seal reads it before the start (``BUILT``: the
    one ``fork_exec``'s wrapper gives the seal); ``given``: then the one it was given (None: this
    process's)."""
    words = policy.command_line(program, argv)
    startup = _shell_startup(given if env is BUILT else env) if _shell_line(program, argv) else None
    _start(policy, refuse, words, " ".join(words or _policy.words(argv)), env, given, startup)


def _shell_line(program: Any, argv: Any) -> bool:
    line = _policy.words(argv)
    first = os.fsdecode(program) if isinstance(program, (str, bytes, os.PathLike)) else (line[0] if line else "")
    return len(line) >= 3 and os.path.basename(first) in _policy.SHELLS and line[1] == "-c"


_SHELL_STARTUP = frozenset(("BASH_ENV", "ZDOTDIR", "SHELLOPTS", "BASHOPTS"))


def _shell_startup(env: Any) -> str | None:
    """The variable of ``env`` (None: this process's) that makes a shell run more than its ``-c`` line, or
    None: a file it reads first (bash's ``BASH_ENV``, zsh's ``ZDOTDIR``), options it takes in (``SHELLOPTS``
    with ``xtrace`` runs what ``PS4`` holds), or a function exported in a command's place
    (``BASH_FUNC_name%%``). The seal judged the line, not those."""
    variables = _variables(env) or {}
    return next((n for n, v in variables.items() if v and (n in _SHELL_STARTUP or n.startswith("BASH_FUNC_"))), None)


_SEARCH = os._execvpe.__code__  # type: ignore[attr-defined]  # os.execvp's search of PATH


def _search() -> Any:
    """The frame of ``os.execvp``'s search of ``PATH`` (``os.execvp``, ``os.spawnvp``, ``pty.spawn``) the
    start is made in, or None. The search catches a refusal, tries the next folder, and at the end raises
    the first refusal it caught: that one counts (and names the program that would have run, below); the
    same command found further on does not."""
    frame: Any = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code is _SEARCH:
            return frame
        frame = frame.f_back
    return None


def _would_run(search: Any, tried: str) -> str:
    """The program the search would have run: the first folder's that exists and may run (the first one
    tried may not be there at all), else the one tried."""
    file, env = search.f_locals.get("file"), search.f_locals.get("env")
    try:
        return shutil.which(os.fsdecode(file), path=os.pathsep.join(os.get_exec_path(env))) or tried
    except (TypeError, ValueError):
        return tried


def fork_exec(policy: Any, refuse: Refuse, args: tuple[Any, ...]) -> None:
    """``FORK_EXEC``'s (executables, argv, cwd, env, own): a multiprocessing worker of this interpreter
    (``own``) is the process itself, sealed with it; anything else is a command like the rest (its
    environment is given the seal by the wrapper, after this check)."""
    executables, argv, _, env, own = args
    if not own:
        spawn(policy, refuse, executables[0] if executables else None, argv, given=env)


def _is_python(program: str) -> bool:
    base = os.path.basename(program)
    if base.startswith(("python", "pypy")) and base.rstrip("0123456789.") in ("python", "pypy"):
        return True
    try:
        return os.path.realpath(program) == os.path.realpath(sys.executable)
    except (TypeError, ValueError):
        return False


def skips_site(argv: Any) -> bool:
    """A Python command line with ``-I``, ``-E`` or ``-S`` (alone or in a cluster) before its script: it
    ignores ``PYTHONPATH`` or ``sitecustomize``, so the seal's environment would not seal it."""
    words = iter(_policy.words(argv)[1:])
    for word in words:
        if word == "--check-hash-based-pycs":  # the one long option that takes an argument
            next(words, None)
        if word.startswith("--"):
            continue
        if not word.startswith("-") or word == "-":
            return False  # the script: the interpreter's own options have ended
        for i, ch in enumerate(word[1:], 1):
            if ch in "IES":
                return True
            if ch in "cm":
                return False
            if ch in "WX":  # the rest of the word, or the next word, is its argument
                if i == len(word) - 1:
                    next(words, None)
                break
    return False


class Carried:
    """The seal's setting for the children of this process, held here rather than read back from
    ``os.environ`` at each start: code that clears the environment (``mock.patch.dict(os.environ,
    clear=True)``) must not start a Python unsealed. Set by ``sealing`` (and put back after), and by a
    sealed child for its own children. ``current``: the setting of the case the starting code runs in
    (its own hosts, and its seal's id, so the child's refusals fail that case alone), when it has one."""

    setting: str | None = None
    child_dir: str = ""
    current: Callable[[], str | None] | None = None

    @classmethod
    def here(cls) -> str | None:
        """The setting for a process started here: the calling case's own, else the one carried."""
        if cls.current is not None:
            try:
                found = cls.current()
            except Exception:  # never leave a child without the seal: the carried one holds
                found = None
            if found is not None:
                return found
        return cls.setting

    @classmethod
    def carry(cls, setting: str | None) -> str | None:
        """Carry ``setting`` (None: nothing); returns the one carried before."""
        before, cls.setting = cls.setting, setting
        try:
            cls.child_dir = os.path.join(json.loads(setting)["dir"], "_child") if setting else ""
        except (ValueError, KeyError, TypeError):
            cls.setting, cls.child_dir = None, ""  # not a replay's setting: nothing of ours to pass
        return before


def _has_seal(env: Any) -> bool:
    """``env`` (given to ``os.execve``/``os.posix_spawn``, read before the audited event; None: this
    process's) carries the seal: its ``HARVESTER_SEAL``, and ``_child`` first on ``PYTHONPATH``."""
    if Carried.setting is None:
        return True
    env = os.environ if env is None else env
    for key, path, text in ((CHILD_ENV, "PYTHONPATH", str), (CHILD_ENV.encode(), b"PYTHONPATH", bytes)):
        try:  # os.environ takes str keys only, os.environb bytes
            value, first = env.get(key), env.get(path)
        except (AttributeError, TypeError):
            continue
        if value is not None and os.fsdecode(value) == Carried.setting:
            return isinstance(first, text) and os.fsdecode(first).split(os.pathsep)[0] == Carried.child_dir
    return False


def sealed_environ(suite: bool = False) -> list[bytes] | None:
    """This process's environment with the seal, for a process started without an environment of its own
    when ``os.environ`` has lost the seal's or the starting case has its own (None: nothing to change)."""
    if Carried.setting is None or ((suite or Carried.here() == Carried.setting) and _has_seal(None)):
        return None
    return with_seal([k + b"=" + v for k, v in os.environb.items()], suite)


def with_seal(env: list[Any], suite: bool = False) -> list[Any]:
    """``fork_exec``'s environment (``b"NAME=value"`` entries) with the seal's setting and ``_child`` first
    on ``PYTHONPATH``: a Python child seals itself with it. A new list; unchanged outside a replay.
    ``suite``: the suite's setting, not the starting case's (multiprocessing's own workers and forkserver,
    which serve whichever case uses their pool next)."""
    setting, child_dir = Carried.setting if suite else Carried.here(), Carried.child_dir
    if setting is None:
        return env
    named = {bytes(e).split(b"=", 1)[0]: i for i, e in enumerate(env) if isinstance(e, (bytes, bytearray))}
    path = bytes(env[named[b"PYTHONPATH"]]).split(b"=", 1)[1] if b"PYTHONPATH" in named else b""
    out = list(env)
    for name, value in ((CHILD_ENV.encode(), setting), (b"PYTHONPATH", first_on_path(child_dir, path))):
        entry = name + b"=" + os.fsencode(value)
        if name in named:
            out[named[name]] = entry
        else:
            out.append(entry)
    return out


def first_on_path(folder: str, path: str | bytes | None) -> str:
    """``folder`` first on the search path ``path`` (once)."""
    rest = [p for p in os.fsdecode(path or "").split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def shell(policy: Any, refuse: Refuse, line: Any) -> None:
    """``os.system``'s line (CPython raises it as bytes) or a shell's: judged as its words."""
    text = os.fsdecode(line) if isinstance(line, (str, bytes, os.PathLike)) else str(line)
    _start(policy, refuse, policy.shell_words(text), text, None, None, _shell_startup(None))  # os.environ
