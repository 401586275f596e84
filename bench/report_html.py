"""HTML report benchmark: a 2,000-case page stays under 5 MB and renders in Chromium in under 2 s.

Workloads: ``demo`` (default) cycles the demo's real candidate and failure-injection results (a third of
them failing: open on load) to 2,000 cases. ``heavy``: every case has 6 checks, 3 recorded and 3 replayed
calls with ~120 characters of args each and two answers of ~250 characters; a quarter fail, each with a
divergence, differing args and 2 no_fixture calls. ``cap``, the worst case: 4 calls a side with args at
the report's 300-character cap, 8 checks, ~400-character answers.

Measured: the Python render (median of 5), the page's size, and in Debian's Chromium (``/usr/bin/chromium``,
headless) the time from navigation to the load event and to the first frame after
it (median of 3), one filter (failed only) and one text search.

    python bench/report_html.py [--cases 2000] [--workload demo|heavy|cap] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harvester.report import (
    Call,
    CaseResult,
    CheckResult,
    Divergence,
    NoFixtureCall,
    Report,
    args_text,
    render_html,
)

TOOLS = ["kb_search", "lookup_order", "get_customer", "issue_refund", "send_email"]


CAP = False  # the "cap" workload: args at the report's cap, 4 calls a side, 8 checks, longer answers
CALLS = 3
CHECKS = 6


def _args(i: int, k: int, changed: bool = False) -> dict[str, object]:
    return {
        "order_id": f"A{i:05d}{'x' if changed else ''}",
        "query": f"refund policy for order {i} and its items, step {k} " * (3 if CAP else 1),
        "filters": {
            "region": "eu",
            "limit": 20,
            **({"since": "2026-01-01", "fields": ["status", "total"]} if CAP else {}),
        },
    }


def case(i: int) -> CaseResult:
    failing = i % 4 == 0
    recorded = [Call(tool=TOOLS[k], args=args_text(_args(i, k))) for k in range(CALLS)]
    replayed = [Call(tool=TOOLS[k], args=args_text(_args(i, k, changed=failing and k == 1))) for k in range(CALLS)]
    if failing:
        replayed[2] = Call(tool="issue_refund", args=args_text({"order_id": f"A{i:05d}", "amount": 500}))
    checks = [
        CheckResult(name=f"check_{k}(x, y)", passed=not (failing and k < 2), detail=f"detail {k} " * 5)
        for k in range(CHECKS)
    ]
    return CaseResult(
        id=f"case-{i:05d}-refund-policy",
        passed=not failing,
        tags=["refunds", ["security", "policy", "happy", "adversarial"][i % 4]],
        why="A customer asked about the refund policy for an order; the agent must look it up first",
        checks=checks,
        answer="The refund window is 30 days from delivery. " * (9 if CAP else 6),
        recorded_answer="Refunds are possible within 30 days of delivery. " * (8 if CAP else 5),
        trajectory=[c.tool for c in replayed],
        steps=4,
        recorded_calls=recorded,
        calls=replayed,
        divergence=Divergence(step=3, recorded=TOOLS[2], actual="issue_refund") if failing else None,
        no_fixture=2 if failing else 0,
        no_fixture_calls=[
            NoFixtureCall(tool="issue_refund", reason="unknown_tool", args={"order_id": f"A{i:05d}", "amount": 500}),
            NoFixtureCall(
                tool="lookup_order",
                reason="no_match",
                differs=["order_id"],
                args=_args(i, 1, changed=True),
                closest=_args(i, 1),
            ),
        ]
        if failing
        else [],
    )


def demo_cases(n: int) -> list[CaseResult]:
    """The demo's candidate and failure-injection results (real replays), cycled to ``n`` cases."""
    from harvester.demo.scenario import run_demo

    with tempfile.TemporaryDirectory() as tmp:
        demo = run_demo(Path(tmp) / "demo", echo=lambda _: None)
    real = demo.candidate.results + demo.injected.results
    return [real[i % len(real)].model_copy(update={"id": f"{real[i % len(real)].id}-{i}"}) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--workload", choices=["demo", "heavy", "cap"], default="demo")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    opts = parser.parse_args()
    global CAP, CALLS, CHECKS
    CAP, CALLS, CHECKS = opts.workload == "cap", 4 if opts.workload == "cap" else 3, 8 if opts.workload == "cap" else 6
    results = demo_cases(opts.cases) if opts.workload == "demo" else [case(i) for i in range(opts.cases)]
    report = Report(suite="bench", results=results)
    baseline = Report(
        suite="bench", results=[r.model_copy(update={"passed": True, "passes": r.trials}) for r in results]
    )
    times = []
    for _ in range(5):
        start = time.perf_counter()
        page = render_html(report, baseline)
        times.append(time.perf_counter() - start)
    size = len(page.encode())
    print(
        f"{opts.cases} cases ({opts.workload}): {size / 1e6:.2f} MB (target < 5 MB), "
        f"python render {statistics.median(times):.2f} s"
    )
    if not Path(opts.chromium).exists():
        print(f"no browser timing: {opts.chromium} missing (apt-get install chromium)")
        return
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        file = Path(tmp) / "report.html"
        file.write_text(page)
        browser = p.chromium.launch(executable_path=opts.chromium, args=["--no-sandbox"])
        loads, frames, navs = [], [], []
        for _ in range(3):
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            start = time.perf_counter()
            tab.goto(file.as_uri(), wait_until="load")
            loads.append(time.perf_counter() - start)
            tab.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            frames.append(time.perf_counter() - start)
            navs.append(tab.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
            tab.close()
        tab = browser.new_page()
        tab.goto(file.as_uri(), wait_until="load")
        filtered = _timed(
            tab,
            "() => { const f = document.getElementById('f-failed'); f.checked = true; "
            "f.dispatchEvent(new Event('change')); }",
        )
        searched = _timed(
            tab,
            "() => { const t = document.getElementById('f-text'); t.value = 'refund'; "
            "t.dispatchEvent(new Event('input')); }",
        )
        shown = tab.inner_text("#f-count")
        browser.close()
    print(
        f"chromium: load event {statistics.median(loads):.2f} s "
        f"(in-page loadEventEnd {statistics.median(navs):.2f} s), "
        f"first frame after load {statistics.median(frames):.2f} s (target < 2 s); failed-only filter "
        f"{filtered * 1000:.0f} ms, then a text search {searched * 1000:.0f} ms ({shown})"
    )


def _timed(tab: object, action: str) -> float:
    """Seconds from the action to the next frame painted, measured in the page."""
    script = (
        "async () => { const t0 = performance.now(); (" + action + ")(); "
        "await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))); "
        "return performance.now() - t0; }"
    )
    return tab.evaluate(script) / 1000  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
