import asyncio
import inspect
import threading

import orjson
import pytest

from harvester.instrument import agent_run, tool
from harvester.seam import executor as current_executor
from harvester.seam import serving as use_executor
from tests.builders.capture import in_memory


@tool
def get_order(order_id: str, verbose: bool = False) -> dict:
    """Look up an order by id."""
    return {"order_id": order_id, "status": "delivered", "live": True}


@tool(name="kb_search")
async def search(query: str) -> str:
    """Search the knowledge base."""
    return f"live result for {query}"


@tool
def explode(reason: str) -> str:
    raise RuntimeError(reason)


@tool(spans=False)
def quiet(x: int) -> int:
    return x * 2


class Recorder:
    """A minimal executor: serves canned results and remembers what it was asked."""

    def __init__(self, label):
        self.label = label
        self.calls = []

    def execute(self, name, args):
        self.calls.append((name, args))
        return {"served_by": self.label, "args": args}

    async def aexecute(self, name, args):
        await asyncio.sleep(0)
        return self.execute(name, args)


@pytest.fixture
def spans():
    return in_memory()


def test_signature_and_docstring_are_kept():
    assert get_order.__doc__ == "Look up an order by id."
    assert str(inspect.signature(get_order)) == "(order_id: str, verbose: bool = False) -> dict"
    assert inspect.iscoroutinefunction(search)
    assert search.__name__ == "search"


def test_production_runs_the_real_function():
    assert get_order("A1")["live"] is True
    assert asyncio.run(search("refund")) == "live result for refund"
    assert quiet(2) == 4


def test_replay_routes_to_the_active_executor_with_bound_args():
    rec = Recorder("case-1")
    with use_executor(rec):
        assert get_order("A1") == {"served_by": "case-1", "args": {"order_id": "A1"}}
        assert get_order(order_id="A2", verbose=True)["args"] == {"order_id": "A2", "verbose": True}
        assert asyncio.run(search("refund"))["served_by"] == "case-1"
        assert quiet(x=3)["args"] == {"x": 3}
    assert current_executor() is None
    assert [c[0] for c in rec.calls] == ["get_order", "get_order", "kb_search", "quiet"]


def test_concurrent_threads_and_tasks_never_share_executors():
    seen = {}

    def worker(label):
        with use_executor(Recorder(label)):
            seen[label] = [get_order(str(i))["served_by"] for i in range(50)]

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(set(v) == {k} for k, v in seen.items()) and len(seen) == 8

    async def task(label):
        with use_executor(Recorder(label)):
            out = []
            for i in range(20):
                out.append((await search(str(i)))["served_by"])
            return label, out

    async def main():
        return await asyncio.gather(*(task(f"a{i}") for i in range(8)))

    for label, out in asyncio.run(main()):
        assert set(out) == {label}


def test_agent_run_emits_genai_spans(spans):
    provider, exporter = spans
    with agent_run("support_agent", "Where is A1?", model="scripted-1", tracer_provider=provider) as run:
        calls = run.model_call(
            "scripted-1",
            input_tokens=10,
            output_tokens=5,
            tool_calls=[{"name": "get_order", "arguments": {"order_id": "A1"}}],
        )
        get_order(**calls[0]["arguments"])
        run.model_call("scripted-1", input_tokens=20, output_tokens=7, text="A1 was delivered.")
        run.finish("A1 was delivered.")
    by_op = {}
    for s in exporter.get_finished_spans():
        by_op.setdefault(s.attributes["gen_ai.operation.name"], []).append(s)
    agent = by_op["invoke_agent"][0]
    assert agent.name == "invoke_agent support_agent"
    assert agent.attributes["gen_ai.agent.name"] == "support_agent"
    assert agent.attributes["final_result"] == "A1 was delivered."
    assert orjson.loads(agent.attributes["gen_ai.input.messages"])[0]["parts"][0]["content"] == "Where is A1?"
    chat = by_op["chat"][0]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 10
    part = orjson.loads(chat.attributes["gen_ai.output.messages"])[0]["parts"][0]
    assert part == {"type": "tool_call", "id": "call_1", "name": "get_order", "arguments": {"order_id": "A1"}}
    tool_span = by_op["execute_tool"][0]
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_1"
    assert orjson.loads(tool_span.attributes["gen_ai.tool.call.arguments"]) == {"order_id": "A1"}
    assert orjson.loads(tool_span.attributes["gen_ai.tool.call.result"])["status"] == "delivered"
    assert tool_span.parent.span_id == agent.context.span_id


def test_tool_error_is_recorded_and_reraised(spans):
    provider, exporter = spans
    with pytest.raises(RuntimeError, match="db down"):
        with agent_run("a", "p", tracer_provider=provider):
            explode("db down")
    tool_span = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool explode")
    assert tool_span.status.status_code.name == "ERROR"
    assert tool_span.events[0].attributes["exception.type"] == "RuntimeError"
    assert "gen_ai.tool.call.result" not in tool_span.attributes


def test_spans_false_emits_no_tool_span(spans):
    provider, exporter = spans
    with agent_run("a", "p", tracer_provider=provider):
        quiet(1)
    assert [s.name for s in exporter.get_finished_spans()] == ["invoke_agent a"]


def test_stop_and_feedback_attributes(spans):
    provider, exporter = spans
    with agent_run("a", "p", tracer_provider=provider) as run:
        run.stop("deferred", "waiting on approval")
        run.feedback("negative")
    attrs = exporter.get_finished_spans()[0].attributes
    assert attrs["harvester.stop"] == "deferred" and attrs["harvester.feedback"] == "negative"


def test_declared_stop_is_read_back_by_the_conventions(spans):
    from harvester.conventions import runs_from_spans

    provider, exporter = spans
    with agent_run("a", "loop forever", tracer_provider=provider) as run:
        run.model_call("m", tool_calls=[{"name": "quiet", "arguments": {"x": 1}}])
        run.stop("max_steps", "no answer after 6 model calls")
    [parsed] = runs_from_spans(exporter.get_finished_spans())
    assert parsed.stop == "max_steps" and parsed.error.message == "no answer after 6 model calls"
    assert parsed.prompt == "loop forever" and parsed.blocked_tools() == ["quiet"]


# -- the helpers never raise into the app ---------------------------------------------------------------
def _deep(n: int) -> dict:
    out: dict = {}
    node = out
    for _ in range(n):
        node["x"] = {}
        node = node["x"]
    return out


ODD_VALUES = {
    "non-string keys": {1: "one", (2, 3): "pair"},
    "int past 64 bits": 2**70,
    "nesting past orjson's depth": _deep(300),
    "lone surrogate": "caf\ud800e",
}


@pytest.mark.parametrize("kind", ODD_VALUES)
def test_a_tool_with_values_orjson_refuses_runs_once_and_returns_its_result(kind, spans):
    provider, exporter = spans
    value = ODD_VALUES[kind]
    ran = []

    @tool
    def store_it(payload):
        ran.append(payload)
        return {"stored": payload}

    with agent_run("a", "p", tracer_provider=provider) as run:
        run.model_call("m", tool_calls=[{"name": "store_it", "arguments": {"payload": value}}])
        result = store_it(payload=value)
        run.finish(str(len(ran)))
    assert result == {"stored": value} and len(ran) == 1  # the side effect ran exactly once
    tool_span = next(s for s in exporter.get_finished_spans() if s.name == "execute_tool store_it")
    assert tool_span.status.status_code.name != "ERROR"
    assert tool_span.attributes["gen_ai.tool.call.arguments"] and tool_span.attributes["gen_ai.tool.call.result"]


def test_the_parameters_a_framework_fills_in_are_not_args():
    class RunContext:  # stands for pydantic-ai's, passed without an annotation that says so
        deps = "secret-db-handle"

    class Shop:
        @tool
        def lookup(self, ctx: "RunContext", order_id: str, run_manager=None) -> str:
            return order_id

        @classmethod
        @tool
        def find(cls, sku: str) -> str:
            return sku

    rec = Recorder("case")
    with use_executor(rec):
        Shop().lookup(RunContext(), "A1", run_manager=object())
        Shop.find("SKU-1")

    @tool
    def plain(ctx, order_id: str) -> str:  # unannotated: told apart by the value's type
        return order_id

    with use_executor(rec):
        plain(RunContext(), "A2")
    assert rec.calls == [("lookup", {"order_id": "A1"}), ("find", {"sku": "SKU-1"}), ("plain", {"order_id": "A2"})]
