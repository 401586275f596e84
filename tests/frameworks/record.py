"""Regenerate ``traces/frameworks/<framework>-<scenario>.json`` from the real framework drivers.

    python -m tests.frameworks.record            # all
    python -m tests.frameworks.record pydantic-ai

Ids come from a counting id generator and timestamps are replaced by their rank (1 ms apart, order
kept), UUIDs are renumbered in order of appearance, and what no reader uses and would only make the
files large or machine-specific is dropped (stack traces, LangChain run metadata, tool schemas,
duplicated OpenLLMetry task payloads): re-running produces identical files.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from harvester.spans import SpanData, from_readable, to_otlp

from . import langchain_agent, openai_agents_agent, pydantic_ai_agent, smolagents_agent

OUT = Path(__file__).resolve().parents[2] / "traces" / "frameworks"
BASE_NS = 1_764_468_000_000_000_000  # 2025-11-30T02:00:00Z
DROP_KEYS = (
    "metadata",
    "logfire.json_schema",
    "logfire.msg",
    "gen_ai.tool.definitions",
    "gen_ai.task.input",
    "gen_ai.task.output",
    "gen_ai.workflow.edges",
    "gen_ai.workflow.nodes",
    "llm.invocation_parameters",
    "model_request_parameters",
)
DROP_PREFIXES = ("traceloop.association.properties.", "llm.tools.")
# Payloads of the spans between the agent and its model/tool calls (graph nodes, middleware hooks) and
# the raw duplicates of what OpenInference also flattens into llm.* keys: no reader looks at them.
PAYLOADS = ("input.value", "output.value", "traceloop.entity.input", "traceloop.entity.output")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|(?<=id=')[0-9a-f]{32}(?=')")
# What an in-between span keeps: enough to classify it and to see an interrupt or error on it.
BETWEEN_KEEP = (
    "openinference.span.kind",
    "traceloop.span.kind",
    "gen_ai.operation.name",
    "traceloop.entity.name",
    "error.type",
)

FRAMEWORKS: dict[str, Callable[[str], list[Any]]] = {
    "pydantic-ai": lambda sc: pydantic_ai_agent.run_scenario(sc, deterministic=True),
    "pydantic-ai-v6": lambda sc: pydantic_ai_agent.run_scenario(sc, version=6, deterministic=True),
    "langchain-openinference": lambda sc: langchain_agent.run_scenario(
        sc, instrumentor="openinference", deterministic=True
    ),
    "langchain-openllmetry": lambda sc: langchain_agent.run_scenario(
        sc, instrumentor="openllmetry", deterministic=True
    ),
    "openai-agents": lambda sc: openai_agents_agent.run_scenario(sc, deterministic=True),
    "smolagents": lambda sc: smolagents_agent.run_scenario(sc, deterministic=True),
}
SCENARIOS = pydantic_ai_agent.SCENARIOS
# Frameworks without every scenario (smolagents has no approval step).
SCENARIOS_OF = {"smolagents": smolagents_agent.SCENARIOS}


def _elide_system_prompts(a: dict[str, Any]) -> None:
    """A framework's built-in system prompt (smolagents: ~5 kB per model call) shortened to its first line."""
    for key in [
        k for k, v in a.items() if k.startswith("llm.input_messages.") and k.endswith(".message.role") and v == "system"
    ]:
        base = key[: -len("role")]
        for k in [k for k in a if k.startswith(base) and isinstance(a[k], str) and len(a[k]) > 120]:
            a[k] = a[k].split("\n", 1)[0][:120] + " [...]"


def _slim(sp: SpanData, times: dict[int, int]) -> SpanData:
    sp.start_ns, sp.end_ns = times[sp.start_ns], times[sp.end_ns]
    a = sp.attributes
    between = (
        a.get("openinference.span.kind") in ("CHAIN", "LLM")
        or a.get("traceloop.span.kind") == "task"
        or a.get("gen_ai.operation.name") in ("execute_task", "create_agent")
    )
    if between and a.get("openinference.span.kind") != "LLM":
        sp.attributes = {k: a[k] for k in BETWEEN_KEEP if k in a}
    else:
        sp.attributes = {
            k: v
            for k, v in a.items()
            if k not in DROP_KEYS and not k.startswith(DROP_PREFIXES) and not (between and k in PAYLOADS)
        }
    _elide_system_prompts(sp.attributes)
    sp.status_message = sp.status_message.split("Traceback (most recent call last)", 1)[0]
    sp.events = [
        {
            "name": e["name"],
            "time_ns": times.get(e["time_ns"], sp.end_ns),
            "attributes": {k: v for k, v in e["attributes"].items() if k != "exception.stacktrace"},
        }
        for e in sp.events
    ]
    return sp


def salted_id(ident: str | None, salt: str) -> str | None:
    """A stable id unique to this file: counting ids alone would repeat in every recording."""
    return None if ident is None else hashlib.sha256(f"{salt}:{ident}".encode()).hexdigest()[: len(ident)]


def document(spans: list[Any], salt: str) -> bytes:
    """The deterministic OTLP/JSON bytes for one scenario's spans (``salt``: the file's own name)."""
    datas = [from_readable(s) for s in spans]
    for d in datas:
        d.trace_id, d.span_id, d.parent_id = (
            salted_id(d.trace_id, salt),
            salted_id(d.span_id, salt),
            salted_id(d.parent_id, salt),
        )
    stamps = sorted({t for d in datas for t in (d.start_ns, d.end_ns)})
    times = {t: BASE_NS + i * 1_000_000 for i, t in enumerate(stamps)}
    text = orjson.dumps(to_otlp(_slim(d, times) for d in datas)).decode()
    seen: dict[str, str] = {}
    text = _UUID.sub(
        lambda m: seen.setdefault(
            m.group(0),
            f"{len(seen) + 1:0{len(m.group(0))}d}"
            if "-" not in m.group(0)
            else f"00000000-0000-4000-8000-{len(seen) + 1:012d}",
        ),
        text,
    )
    return text.encode() + b"\n"


def record(frameworks: list[str] | None = None) -> list[Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    for fw in frameworks or list(FRAMEWORKS):
        for sc in SCENARIOS_OF.get(fw, SCENARIOS):
            path = OUT / f"{fw}-{sc}.json"
            path.write_bytes(document(FRAMEWORKS[fw](sc), f"{fw}-{sc}"))
            written.append(path)
    return written


if __name__ == "__main__":
    for p in record(sys.argv[1:] or None):
        print(f"{p.relative_to(OUT.parents[1])}  {p.stat().st_size} bytes")
