"""The case folder at size: replay start-up and ``review``'s first case, with as many pending cases as accepted.

A folder holds N accepted harvested cases (3 fixtures of ~1 KB, a trajectory check, an order rule, a
forbidden tool) and N pending ones beside them, at N = 200 and 2,000. Each figure is one command in a
fresh process (``python -m harvester``, this checkout's code), so its peak RSS is its own (``wait4``):

- replay start-up: ``harvester replay`` until its agent factory is first called (the factory exits the
  process there); per accepted case: (time at 2,000 - time at 200) / 1,800 (target <= 0.3 ms), the
  process's fixed costs cancelling out;
- ``review``'s first case: ``harvester review`` shows the first pending case and is answered ``q``; over
  the CLI's start-up (``harvester --version``) at 2,000 + 2,000 (target < 0.5 s);
- peak RSS of each at 2,000 over 200 (target <= 1.3x: a small record per case, never the whole folder).

Medians of ``--repeat`` interleaved rounds. Times are judged in the process's own CPU time (user and
system, from ``wait4``), the wall time printed beside it: on a shared machine the wall time moves with
the neighbours (each command is one thread reading files the page cache holds, so on a quiet machine
the two agree).

    python bench/cases.py              # 200 and 2,000
    python bench/cases.py --quick      # 50 and 500, one round
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harvester.case import AgentCase, save_case
from harvester.config import Config
from harvester.harvest import case_from_run
from harvester.model import Run, ToolCall

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS_PER_CASE = 0.3
TARGET_REVIEW_S = 0.5
FLAT_FACTOR = 1.3
TEMPLATES = 20
PARAGRAPH = "Orders can be returned within 30 days of delivery when unused and in their original packaging. " * 4

# The agent factory replay start-up is timed to: its first call is the end of start-up.
AGENT = """
import os, sys, time

def build():
    sys.stderr.write(f"started {time.time()!r}\\n")
    sys.stderr.flush()
    os._exit(0)
"""


def _template(i: int) -> AgentCase:
    """A case harvested from a run: three tool calls with ~1 KB results, a refund it should not have made."""
    order = f"A{1000 + i}"
    calls = [
        ToolCall(name="kb_search", call_id="c1", args={"query": f"refund policy {i}"}, result=PARAGRAPH),
        ToolCall(name="get_order", call_id="c2", args={"order_id": order}, result={"notes": PARAGRAPH}),
        ToolCall(name="issue_refund", call_id="c3", args={"order_id": order}, result={"ok": True}),
    ]
    prompt = f"Can I get a refund for order {order} after {i} days?"
    run = Run(trace_id=f"{i:032x}", run_id=f"{i:016x}", prompt=prompt, answer="Refunded.", stop="answered", calls=calls)
    return case_from_run(run, config=Config(mutating_tools=["issue_refund"]), why="refunded outside the window")


def build_folder(root: Path, n: int) -> None:
    """``n`` accepted cases and ``n`` pending ones, copies of a few harvested templates under their own ids."""
    templates = [_template(i) for i in range(TEMPLATES)]
    for status, sub in (("accepted", root), ("pending", root / "pending")):
        for i in range(n):
            base = templates[i % TEMPLATES]
            case = base.model_copy(update={"id": f"{status}-{i:05d}", "status": status})
            save_case(case, sub)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def _run(args: list[str], cwd: Path, stdin: bytes = b"") -> tuple[float, float, float, str]:
    """(seconds until it exited, or until replay's agent was first built; its CPU seconds, user and
    system, till it exited; peak RSS in MB; stderr)."""
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harvester", *args],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    end = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    started = [float(line.split()[1]) for line in err.splitlines() if line.startswith("started ")]
    cpu = usage.ru_utime + usage.ru_stime
    return (started[0] if started else end) - start, cpu, usage.ru_maxrss / 1024, err


Row = tuple[float, float, float]  # wall seconds, CPU seconds, peak RSS MB


def measure(work: Path, sizes: list[int], repeat: int) -> dict[str, dict[int, list[Row]]]:
    (work / "benchagent.py").write_text(AGENT)
    for n in sizes:
        build_folder(work / f"cases-{n}", n)
    out: dict[str, dict[int, list[Row]]] = {"replay": {}, "review": {}, "version": {}}
    for _ in range(repeat):
        secs, cpu, rss, _ = _run(["--version"], work)
        out["version"].setdefault(0, []).append((secs, cpu, rss))
        for n in sizes:
            folder = str(work / f"cases-{n}")
            replay = ["replay", "--agent", "benchagent:build", "--cases", folder, "--no-progress"]
            secs, cpu, rss, err = _run(replay, work)
            if "started" not in err:
                raise SystemExit(f"replay at {n} did not start its agent: {err.strip()[-300:]}")
            out["replay"].setdefault(n, []).append((secs, cpu, rss))
            secs, cpu, rss, err = _run(["review", "--cases", folder], work, stdin=b"q\n")
            if "Traceback" in err or "error" in err:
                raise SystemExit(f"review at {n} failed: {err.strip()[-300:]}")
            out["review"].setdefault(n, []).append((secs, cpu, rss))
    return out


def _median(rows: list[Row], i: int) -> float:
    return statistics.median(r[i] for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 and 500 cases, one round")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (default 3)")
    opts = parser.parse_args()
    small, big = (50, 500) if opts.quick else (200, 2000)
    repeat = 1 if opts.quick else opts.repeat
    with tempfile.TemporaryDirectory(prefix="harvester-bench-cases-") as tmp:
        got = measure(Path(tmp), [small, big], repeat)
    version = _median(got["version"][0], 0)
    print(
        f"CLI start-up (harvester --version): {version * 1000:.0f} ms ({_median(got['version'][0], 1) * 1000:.0f} ms "
        f"CPU), {_median(got['version'][0], 2):.0f} MB"
    )
    for what in ("replay", "review"):
        for n in (small, big):
            rows = got[what][n]
            print(
                f"{what:<6} {n:>5} accepted + {n:>5} pending: {_median(rows, 0) * 1000:7.0f} ms "
                f"({_median(rows, 1) * 1000:5.0f} ms CPU), peak RSS {_median(rows, 2):6.1f} MB"
            )
    # Judged in CPU time (the process's own, from wait4): on a shared machine wall time moves with the neighbours.
    wall_per_case, per_case = (
        (_median(got["replay"][big], i) - _median(got["replay"][small], i)) / (big - small) * 1000 for i in (0, 1)
    )
    ok_start = per_case <= TARGET_MS_PER_CASE
    print(
        f"replay start-up per accepted case: {per_case:.3f} ms CPU ({wall_per_case:.3f} ms wall) "
        f"(target <= {TARGET_MS_PER_CASE}): {_verdict(ok_start)}"
    )
    over_wall, over = (_median(got["review"][big], i) - _median(got["version"][0], i) for i in (0, 1))
    ok_review = over < TARGET_REVIEW_S
    print(
        f"review's first case at {big} + {big}, over CLI start-up: {over:.2f} s CPU ({over_wall:.2f} s wall) "
        f"(target < {TARGET_REVIEW_S}): {_verdict(ok_review)}"
    )
    ok_flat = True
    for what in ("replay", "review"):
        ratio = _median(got[what][big], 2) / _median(got[what][small], 2)
        ok = ratio <= FLAT_FACTOR
        ok_flat = ok_flat and ok
        print(f"{what} peak RSS {big} / {small}: {ratio:.2f}x (target <= {FLAT_FACTOR}x): {_verdict(ok)}")
    ok = ok_start and ok_review and ok_flat
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    raise SystemExit(main())
