"""An app's own agent loop, traced with ``harvester.agent_run`` and ``@harvester.tool``, whose tool calls
run in threads: ``HARVESTER_TEST_THREADS`` = ``pool`` (a ``ThreadPoolExecutor``), ``thread`` (one
``threading.Thread`` per call), ``executor`` (``loop.run_in_executor``) or ``to_thread``
(``asyncio.to_thread``)."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import harvester

from . import shop

THREADS_ENV = "HARVESTER_TEST_THREADS"
MODES = ("pool", "thread", "executor", "to_thread")
TOOLS = {f.__name__: harvester.tool(f) for f in (shop.kb_search, shop.get_order, shop.issue_refund)}


def _call(call: dict[str, Any]) -> Any:
    return TOOLS[call["name"]](**call["arguments"])


def _in_threads(calls: list[dict[str, Any]]) -> list[Any]:
    mode = os.environ.get(THREADS_ENV, "pool")
    if mode == "pool":
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            return list(pool.map(_call, calls))
    if mode == "thread":
        out: list[Any] = [None] * len(calls)

        def one(i: int) -> None:
            out[i] = _call(calls[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    async def gathered() -> list[Any]:
        if mode == "executor":
            loop = asyncio.get_running_loop()
            return list(await asyncio.gather(*(loop.run_in_executor(None, _call, c) for c in calls)))
        return list(await asyncio.gather(*(asyncio.to_thread(_call, c) for c in calls)))

    return asyncio.run(gathered())


def build(provider: TracerProvider | None = None):
    def agent(prompt: str) -> str:
        with harvester.agent_run("support_agent", prompt, model="scripted", tracer_provider=provider) as run:
            for step in shop.STEPS[shop.variant()]:
                if isinstance(step, str):
                    run.model_call("scripted", input_tokens=100, output_tokens=10, text=step)
                    run.finish(step)
                    break
                calls = run.model_call(
                    "scripted",
                    input_tokens=100,
                    output_tokens=10,
                    tool_calls=[{"id": call_id, "name": name, "arguments": args} for name, args, call_id in step],
                )
                _in_threads(calls)
            return run.answer or ""

    return agent


def serve(provider: TracerProvider) -> None:
    build(provider)(shop.PROMPT)
