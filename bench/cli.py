"""The ``harvester`` command's start-up: what every command pays before it does anything.

    python bench/cli.py [--rounds N] [--against REV]

Each command runs in a fresh process as a user's shell starts it: the console script installed beside
this interpreter (``python -m harvester`` when there is none), with this checkout first on the path
and its bytecode compiled, as ``pip install`` leaves it. The commands are ``--version``, ``--help``
and ``traces list --limit 5`` over a store of 200 runs, each the best of ``--rounds`` (default 15),
taken in turns with a bare ``python -c pass`` whose best is subtracted: what is left is harvester's
(imports, click, the command). Target: ``--version`` and ``--help`` at most 0.15 s over it.

``--against REV``: the same commands run by ``REV``'s ``harvester`` package (from this clone's
history), in the same turns, so that a before and an after are measured side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capture import installed  # bench/, this script's folder, is first on sys.path
from store import release_env

TARGET_S = 0.15
COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "traces list --limit 5": ["traces", "list", "--limit", "5"],
}


def harvester_command() -> list[str]:
    """The console script this interpreter installed (not a version manager's shim, which adds its own
    start-up), else ``python -m harvester``."""
    script = Path(sys.executable).parent / "harvester"
    return [str(script)] if script.exists() else [sys.executable, "-m", "harvester"]


def make_store(path: Path, runs: int = 200) -> None:
    from harvester.model import Run, ToolCall
    from harvester.store import TraceStore

    with TraceStore(path) as store:
        store.add_many(
            Run(
                trace_id=f"{i:032x}",
                agent="support",
                prompt=f"Where is order A{1000 + i}?",
                answer="It shipped yesterday.",
                stop="answered",
                calls=[ToolCall(name="get_order", call_id="c1", args={"order_id": f"A{i}"}, result={"ok": True})],
                started_at=f"2026-12-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
            )
            for i in range(runs)
        )


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="fresh processes per command (best of; default 15)")
    parser.add_argument("--against", metavar="REV", help="also run REV's harvester, in the same turns")
    args = parser.parse_args()
    harvester = harvester_command()
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as tmp:
        store = Path(tmp) / "traces.db"
        make_store(store)
        sides = {"now": installed()}
        if args.against:
            sides[args.against] = release_env(args.against, Path(tmp))
        runs = {("python", ""): ([sys.executable, "-c", "pass"], sides["now"])}
        for side, env in sides.items():
            env["HARVESTER_STORE"] = str(store)
            runs.update({(side, name): ([*harvester, *argv], env) for name, argv in COMMANDS.items()})
        for argv, env in runs.values():  # warm the page cache; the bytecode is compiled already
            timed(argv, env)
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.rounds):  # in turns, so that the machine's moods touch every command alike
            for key, (argv, env) in runs.items():
                best[key] = min(best[key], timed(argv, env))
    base = best[("python", "")]
    print(f"{' '.join(harvester)}, best of {args.rounds} fresh processes; python -c pass: {base * 1000:.0f} ms")
    print(f"  {'over python -c pass':<24}" + "".join(f"{side:>12}" for side in sides))
    ok = True
    for name in COMMANDS:
        over = {side: best[(side, name)] - base for side in sides}
        target = name != "traces list --limit 5"
        ok &= over["now"] <= TARGET_S or not target
        cells = "".join(f"{over[side] * 1000:>9.0f} ms" for side in sides)
        print(f"  {name:<24}{cells}" + (f"   target <= {TARGET_S * 1000:.0f} ms" if target else ""))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
