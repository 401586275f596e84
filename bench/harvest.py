"""Batch harvest throughput and memory: stored runs -> case files, at 10k and 100k runs; and cases sharing a slug.

Realistic traffic: a few hundred prompt templates with varying order ids, 3 tool calls per run
with ~1 KB results, ~10% failures (tool errors, loops, denied refunds). Runs are written with the
store API, then ``harvest()`` streams them into ``cases/pending/``. Throughput is timed without
tracing; peak memory is measured in a second harvest into a fresh folder under ``tracemalloc``.
Memory must stay flat from 10k to 100k runs (streaming), and throughput must reach 2,000 runs/s.

Beside it, 2,000 and 8,000 runs of distinct situations whose prompts share their first words (a
templated prompt: every case gets the same slug, so its id needs a suffix): harvest time at 8,000 over
2,000 (linear is 4x; target <= 4.5x).

    python bench/harvest.py            # 10k and 100k, then 2,000 and 8,000 sharing a slug
    python bench/harvest.py --quick    # 10k only, then 500 and 2,000 sharing a slug
    python bench/harvest.py --slugs    # the shared slug only
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harvester.config import Config
from harvester.harvest import harvest
from harvester.model import ErrorInfo, Run, ToolCall, Usage
from harvester.store import TraceStore

TARGET_RUNS_PER_S = 2000.0
FLAT_FACTOR = 1.5  # peak at 100k may be at most this times the peak at 10k (plus a little slack)
FLAT_SLACK_MB = 4.0
SLUG_RATIO = 4.5  # harvest time of 4x the runs, each its own case under one slug (linear: 4x)

TOPICS = [
    "refund",
    "return",
    "shipping",
    "invoice",
    "warranty",
    "password",
    "subscription",
    "delivery",
    "exchange",
    "discount",
    "coupon",
    "address",
    "payment",
    "order status",
    "cancellation",
    "gift card",
    "loyalty points",
    "damaged item",
    "missing item",
    "tracking number",
]
FORMS = [
    "Can I get a {t} for order {n}?",
    "What is the {t} policy for order {n}?",
    "Help with {t} on order {n}",
    "Why is my {t} for order {n} not working?",
    "I need the {t} details of order {n}",
    "Is a {t} possible for order {n} after {d} days?",
    "Please check {t} for order {n}",
    "How long does a {t} take for order {n}?",
    "Who handles {t} for order {n}?",
    "Update the {t} for order {n}",
    "My {t} for order {n} failed",
    "Where do I see {t} for order {n}?",
]
PARAGRAPH = (
    "Orders can be returned within 30 days of delivery when unused and in their original packaging. "
    "Refunds are issued to the original payment method within 5 business days of receipt. "
)


def _runs(n: int, seed: int = 7) -> Iterator[Run]:
    rng = random.Random(seed)
    for i in range(n):
        topic, form = rng.choice(TOPICS), rng.choice(FORMS)
        order = f"A{rng.randrange(1000, 99999)}"
        prompt = form.format(t=topic, n=order, d=rng.randrange(1, 90))
        docs = [
            {"id": f"kb-{rng.randrange(500)}", "title": f"{topic} policy", "text": PARAGRAPH * 2} for _ in range(2)
        ]  # ~1 KB
        order_doc = {
            "order_id": order,
            "status": rng.choice(["delivered", "shipped", "processing"]),
            "days_since_delivery": rng.randrange(0, 90),
            "items": [{"sku": f"S{k}", "qty": 1} for k in range(3)],
            "notes": PARAGRAPH * 3,
        }
        calls = [
            ToolCall(
                name="kb_search", call_id="c1", args={"query": f"{topic} policy", "request_id": f"r{i}"}, result=docs
            ),
            ToolCall(name="get_order", call_id="c2", args={"order_id": order}, result=order_doc),
        ]
        stop, error = "answered", None
        roll = rng.random()
        if roll < 0.04:
            calls.append(
                ToolCall(
                    name="get_order",
                    call_id="c3",
                    args={"order_id": order},
                    status="error",
                    error=ErrorInfo(type="timeout", message="orders-db timeout"),
                )
            )
        elif roll < 0.07:
            calls.append(ToolCall(name="issue_refund", call_id="c3", args={"order_id": order}, status="blocked"))
            stop = "deferred"
        elif roll < 0.09:
            calls.append(
                ToolCall(
                    name="kb_search", call_id="c3", args={"query": f"{topic} policy", "request_id": "x"}, result=docs
                )
            )
            calls.append(
                ToolCall(
                    name="kb_search", call_id="c4", args={"query": f"{topic} policy", "request_id": "y"}, result=docs
                )
            )
            stop = "loop_detected"
        elif roll < 0.10:
            stop, error = "error", ErrorInfo(type="RateLimitError", message="429 from provider")
        else:
            calls.append(
                ToolCall(
                    name="kb_search",
                    call_id="c3",
                    args={"query": f"{topic} {order}"},
                    result={"hits": 3, "text": PARAGRAPH * 2},
                )
            )
        yield Run(
            trace_id=f"{i:032x}",
            run_id=f"{i:016x}",
            agent="support_agent",
            model="gpt-4.1-mini",
            prompt=prompt,
            answer=None if error else f"About your {topic}: within 30 days.",
            stop=stop,
            error=error,
            calls=calls,
            usage=Usage(input_tokens=1200, output_tokens=80),
            started_at=f"2026-11-{1 + i % 28:02d}T01:02:03Z",
            duration_ms=812.0,
        )


def _word(i: int) -> str:
    """A letters-only token per ``i`` (digits would collapse into one signature)."""
    out = ""
    while True:
        out += "abcdefghijklmnopqrstuvwxyz"[i % 26]
        i //= 26
        if not i:
            return out


def _same_slug(n: int) -> Iterator[Run]:
    """``n`` distinct situations (a prompt differing past its sixth meaningful word) sharing one slug."""
    for i in range(n):
        yield Run(
            trace_id=f"{i:032x}",
            run_id=f"{i:016x}",
            agent="support_agent",
            prompt=f"Need help with refund of my damaged order, ref {_word(i)}",
            answer="Refund requested.",
            stop="answered",
            calls=[ToolCall(name="kb_search", call_id="c1", args={"query": "refund"}, result=PARAGRAPH)],
            started_at="2026-11-01T01:02:03Z",
        )


def measure_slugs(store: TraceStore, n: int, folder: Path) -> float:
    """CPU seconds (the machine is shared: wall time moves with the neighbours) to harvest ``n`` runs
    that each make their own case, all with one slug."""
    t0 = time.process_time()
    result = harvest(store, folder, config=CONFIG)
    elapsed = time.process_time() - t0
    assert result.new == n, (result.new, n)
    return elapsed


def slugs(small: int, big: int, work: Path, rounds: int = 3) -> bool:
    """The shared-slug harvest at both sizes, ``rounds`` interleaved rounds into fresh folders, medians."""
    stores = {}
    for n in (small, big):
        stores[n] = TraceStore(work / f"slugs-{n}.db")
        stores[n].add_many(_same_slug(n))
    got: dict[int, list[float]] = {small: [], big: []}
    harvest(stores[small], work / "slug-warm-up", config=CONFIG, limit=50)  # imports and caches, not timed
    for r in range(rounds):
        for n in (small, big):
            got[n].append(measure_slugs(stores[n], n, work / f"slug-cases-{n}-{r}"))
    for store in stores.values():
        store.close()
    times = {n: statistics.median(v) for n, v in got.items()}
    for n, secs in times.items():
        print(f"{n:>7} runs -> {n:>5} cases sharing a slug: {secs:6.2f} s CPU, {n / secs:7.0f} runs/s", flush=True)
    ratio = times[big] / times[small]
    ok = ratio <= SLUG_RATIO
    verdict = "PASS" if ok else "FAIL"
    print(f"shared slug {small} -> {big} runs: {ratio:.2f}x the time (target <= {SLUG_RATIO}x): {verdict}")
    return ok


CONFIG = Config(
    mutating_tools=["issue_refund"],
    ignore_args={"kb_search": ["request_id"]},
    prices={"gpt-4.1-mini": {"input": 0.0004, "output": 0.0016}},
)


def measure(n: int, work: Path) -> dict[str, float]:
    store = TraceStore(work / f"traces-{n}.db")
    t0 = time.perf_counter()
    store.add_many(_runs(n))
    build_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    result = harvest(store, work / f"cases-{n}", config=CONFIG)
    elapsed = time.perf_counter() - t0

    tracemalloc.start()
    harvest(store, work / f"cases-{n}-traced", config=CONFIG)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    store.close()
    assert result.runs == n, (result.runs, n)
    return {
        "runs": n,
        "cases": result.cases,
        "build_s": build_s,
        "seconds": elapsed,
        "runs_per_s": n / elapsed,
        "peak_mb": peak / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k runs only (no flatness check); 500/2,000 slugs")
    parser.add_argument("--slugs", action="store_true", help="only the cases sharing a slug")
    opts = parser.parse_args()
    sizes = [] if opts.slugs else [10_000] if opts.quick else [10_000, 100_000]
    rows = []
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as tmp:
        ok_slugs = slugs(*((500, 2000) if opts.quick else (2000, 8000)), Path(tmp))
        for n in sizes:
            rows.append(measure(n, Path(tmp)))
            r = rows[-1]
            print(
                f"{r['runs']:>7} runs -> {r['cases']:>5} cases: {r['seconds']:6.2f} s, {r['runs_per_s']:7.0f} runs/s, "
                f"peak {r['peak_mb']:6.1f} MB traced (store built in {r['build_s']:.1f} s)",
                flush=True,
            )
    if not rows:
        return 0 if ok_slugs else 1
    ok_speed = rows[0]["runs_per_s"] >= TARGET_RUNS_PER_S
    print(
        f"throughput at 10k: {rows[0]['runs_per_s']:.0f} runs/s (target >= {TARGET_RUNS_PER_S:.0f}): "
        f"{'PASS' if ok_speed else 'FAIL'}"
    )
    ok_flat = True
    if len(rows) > 1:
        limit = rows[0]["peak_mb"] * FLAT_FACTOR + FLAT_SLACK_MB
        ok_flat = rows[1]["peak_mb"] <= limit
        print(
            f"memory 10k -> 100k: {rows[0]['peak_mb']:.1f} -> {rows[1]['peak_mb']:.1f} MB "
            f"(flat: <= {limit:.1f} MB): {'PASS' if ok_flat else 'FAIL'}"
        )
    ok = ok_speed and ok_flat and ok_slugs
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
