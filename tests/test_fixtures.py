"""FixtureTools: serving, repeats, no_fixture diagnosis, failure injection, isolation."""

from __future__ import annotations

import asyncio
import pickle
import threading

import orjson
import pytest

import harvester
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.errors import NoFixture
from harvester.fixtures import HUGE_RESULTS, MODES, FixtureTools, ToolFailure
from harvester.replay import recovery_variants
from harvester.seam import serving as use_executor


def fx(tool, args, result=None, error=None, ignore=()):
    out = {"key": fixture_key(tool, args, ignore), "tool": tool, "args": args, "result": result}
    if error:
        out["error"] = error
    return out


def make_case(**kw) -> AgentCase:
    base = {
        "id": "c1",
        "prompt": "Refund order A1001",
        "why": "test",
        "appropriate_tools": ["kb_search", "get_order"],
        "fixtures": [
            fx("kb_search", {"query": "refund policy", "limit": 3}, "Refunds within 30 days."),
            fx("get_order", {"order_id": "A1001"}, {"status": "delivered"}),
            fx("get_order", {"order_id": "A1001"}, {"status": "refunded"}),
            fx("check_inventory", {"sku": "SKU-1"}, error={"type": "timeout", "message": "orders-db timeout"}),
        ],
    }
    base.update(kw)
    return AgentCase.model_validate(base)


def test_serves_by_args_regardless_of_key_order():
    tools = FixtureTools(make_case())
    assert tools.execute("kb_search", {"limit": 3, "query": "refund policy"}) == "Refunds within 30 days."
    assert tools.log[0].outcome == "served"
    assert tools.no_fixture == 0


def test_repeats_serve_in_recorded_order_then_last_again_as_redundant():
    tools = FixtureTools(make_case())
    got = [tools.execute("get_order", {"order_id": "A1001"})["status"] for _ in range(3)]
    assert got == ["delivered", "refunded", "refunded"]
    assert [e.outcome for e in tools.log] == ["served", "served", "repeat"]
    assert tools.redundant == 1


def test_strict_repeats_answers_already_played():
    tools = FixtureTools(make_case(strict_repeats=True))
    tools.execute("kb_search", {"query": "refund policy", "limit": 3})
    res = tools.execute("kb_search", {"query": "refund policy", "limit": 3})
    assert res["error"] == "no_fixture" and res["reason"] == "already_played"
    assert "strict_repeats" in res["hint"]
    assert tools.no_fixture == 1


def test_recorded_error_is_raised_as_tool_failure():
    tools = FixtureTools(make_case())
    with pytest.raises(ToolFailure) as info:
        tools.execute("check_inventory", {"sku": "SKU-1"})
    assert (info.value.type, info.value.message) == ("timeout", "orders-db timeout")
    assert isinstance(info.value, Exception)


def test_served_results_are_private_copies():
    tools = FixtureTools(make_case())
    tools.execute("get_order", {"order_id": "A1001"})["status"] = "mutated"
    assert tools.case.fixtures[1].result == {"status": "delivered"}


def test_no_match_names_what_differs_and_suggests_ignore_args():
    tools = FixtureTools(make_case())
    res = tools.execute("kb_search", {"query": "refund policy", "limit": 5})
    assert res["error"] == "no_fixture" and res["reason"] == "no_match"
    assert res["closest"] == [
        {"tool": "kb_search", "args": {"query": "refund policy", "limit": 3}, "differs": ["limit"]}
    ]
    assert '"ignore_args": {"kb_search":["limit"]}' in res["hint"]
    assert "harvester rerecord" in res["hint"]
    assert tools.log[0].reason == "no_match"


def test_closest_is_ranked_by_agreeing_paths_and_capped():
    recorded = [fx("search", {"q": "a", "page": i, "lang": "en" if i == 4 else "fr"}, i) for i in range(6)]
    tools = FixtureTools(make_case(fixtures=recorded))
    res = tools.execute("search", {"q": "a", "page": 9, "lang": "en"})
    assert len(res["closest"]) == 3
    assert res["closest"][0]["args"]["page"] == 4 and res["closest"][0]["differs"] == ["page"]


def test_nested_paths_in_differs():
    tools = FixtureTools(make_case(fixtures=[fx("t", {"filter": {"since": "2024-01-01", "kind": "x"}}, 1)]))
    res = tools.execute("t", {"filter": {"since": "2025-02-02", "kind": "x"}})
    assert res["closest"][0]["differs"] == ["filter.since"]
    assert '{"t":["filter.since"]}' in res["hint"]


def test_nothing_similar_and_unknown_tool():
    tools = FixtureTools(make_case())
    assert tools.execute("kb_search", {"query": "other", "limit": 9})["reason"] == "nothing_similar"
    res = tools.execute("issue_refund", {"order_id": "A1001"})
    assert res["reason"] == "unknown_tool" and "kb_search" in res["message"] and res["closest"] == []


def test_ignore_args_matches_despite_changing_field():
    case = make_case(
        ignore_args={"kb_search": ["request_id"]},
        fixtures=[fx("kb_search", {"query": "q", "request_id": "r1"}, "hit", ignore=["request_id"])],
    )
    tools = FixtureTools(case)
    assert tools.execute("kb_search", {"query": "q", "request_id": "r2"}) == "hit"


def test_project_ignore_args_apply_with_the_cases():
    case = make_case(
        ignore_args={"kb_search": ["session"]},
        fixtures=[fx("kb_search", {"query": "q", "request_id": "r1", "session": "s1"}, "hit", ignore=["session"])],
    )
    assert (
        FixtureTools(case).execute("kb_search", {"query": "q", "request_id": "r2", "session": "s2"})["reason"]
        == "no_match"
    )
    tools = FixtureTools(case, ignore_args={"kb_search": ["request_id"], "other": ["x"]})
    assert tools.execute("kb_search", {"query": "q", "request_id": "r2", "session": "s2"}) == "hit"
    assert tools.log[0].outcome == "served"


def test_no_match_hint_says_where_the_ignore_args_entry_goes():
    res = FixtureTools(make_case()).execute("kb_search", {"query": "refund policy", "limit": 5})
    assert 'add "ignore_args": {"kb_search":["limit"]} to the case file (c1.json)' in res["hint"]
    assert 'kb_search = ["limit"] under [tool.harvester.ignore_args]' in res["hint"]
    assert "future harvests" in res["hint"]
    odd = FixtureTools(make_case(fixtures=[fx("my.tool", {"a": 1, "b": 2}, 1)])).execute("my.tool", {"a": 1, "b": 3})
    assert '"my.tool" = ["b"] under [tool.harvester.ignore_args]' in odd["hint"]  # a dotted key is quoted in TOML


def test_raise_no_fixture_opt_in():
    tools = FixtureTools(make_case(), raise_no_fixture=True)
    with pytest.raises(NoFixture) as info:
        tools.execute("issue_refund", {})
    assert info.value.result["reason"] == "unknown_tool"


@pytest.mark.parametrize("mode", ["timeout", "not_found", "rate_limit", "permission"])
def test_injected_error_modes_raise(mode):
    tools = FixtureTools(make_case(inject_failures={"kb_search": {"mode": mode}}))
    with pytest.raises(ToolFailure) as info:
        tools.execute("kb_search", {"query": "refund policy", "limit": 3})
    assert info.value.message
    assert tools.log[0].outcome == "injected" and tools.log[0].mode == mode


def test_injected_result_modes():
    def first(mode, tool="get_order", args=None):
        tools = FixtureTools(make_case(inject_failures={tool: {"mode": mode}}))
        return tools.execute(tool, args or {"order_id": "A1001"})

    assert first("empty") == {}
    assert first("empty", "kb_search", {"query": "refund policy", "limit": 3}) == ""
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(first("malformed"))
    assert len(first("huge")) == HUGE_RESULTS


def test_inject_first_n_calls_only():
    tools = FixtureTools(make_case(inject_failures={"get_order": {"mode": "timeout", "times": 1}}))
    with pytest.raises(ToolFailure):
        tools.execute("get_order", {"order_id": "A1001"})
    assert tools.execute("get_order", {"order_id": "A1001"}) == {"status": "delivered"}


def test_recovery_variants_one_per_mode_on_first_appropriate_tool():
    variants = recovery_variants(make_case(tags=["refunds"]))
    assert [v.id for v in variants] == [f"c1@{m}" for m in MODES]
    assert all(list(v.inject_failures) == ["kb_search"] for v in variants)
    assert variants[0].tags == ["recovery", "recovery/timeout"]  # not the base case's: they test recovery
    assert recovery_variants(make_case(appropriate_tools=[], fixtures=[])) == []


def test_tool_routes_through_the_active_executor():
    calls = []

    @harvester.tool(spans=False)
    def get_order(order_id: str) -> dict:
        calls.append(order_id)
        return {"status": "live"}

    tools = FixtureTools(make_case())
    with use_executor(tools):
        assert get_order("A1001") == {"status": "delivered"}
    assert get_order("A1001") == {"status": "live"}
    assert calls == ["A1001"]  # the live tool ran only outside the replay


def _isolation_cases(n):
    return [make_case(id=f"c{i}", fixtures=[fx("get_order", {"order_id": "A1001"}, {"case": i})]) for i in range(n)]


@harvester.tool(name="get_order", spans=False)
def _get_order(order_id: str) -> dict:
    raise AssertionError("live tool called inside a replay")


@harvester.tool(name="get_order", spans=False)
async def _aget_order(order_id: str) -> dict:
    raise AssertionError("live tool called inside a replay")


def test_concurrent_threads_never_see_each_others_fixtures():
    cases = _isolation_cases(16)
    barrier = threading.Barrier(len(cases))
    seen = {}

    def worker(case):
        with use_executor(FixtureTools(case)):
            barrier.wait()
            seen[case.id] = [_get_order("A1001")["case"] for _ in range(20)]

    threads = [threading.Thread(target=worker, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {f"c{i}": [i] * 20 for i in range(16)}


def test_concurrent_tasks_never_see_each_others_fixtures():
    cases = _isolation_cases(16)

    async def one(case):
        with use_executor(FixtureTools(case)):
            out = []
            for _ in range(5):
                await asyncio.sleep(0)
                out.append((await _aget_order("A1001"))["case"])
            return case.id, out

    async def main():
        return dict(await asyncio.gather(*(one(c) for c in cases)))

    assert asyncio.run(main()) == {f"c{i}": [i] * 5 for i in range(16)}


def test_recorded_failures_are_raised_as_their_own_type_where_it_can_be_named() -> None:
    import pydantic_ai

    from harvester.fixtures import ToolFailure, tool_failure

    timeout = tool_failure("TimeoutError", "upstream timed out")
    assert (
        isinstance(timeout, TimeoutError) and isinstance(timeout, ToolFailure) and str(timeout) == "upstream timed out"
    )
    assert (timeout.type, timeout.message) == ("TimeoutError", "upstream timed out")
    retry = tool_failure("ToolRetryError", "use upper case")
    assert isinstance(retry, pydantic_ai.ModelRetry) and retry.message == "use upper case"
    for name in ("OrdersDbTimeout", "UnicodeDecodeError", "print"):  # unknown, unbuildable, not an exception
        plain = tool_failure(name, "m")  # a ToolFailure by the recorded name, its text the recorded message
        assert type(plain).__name__ == name and type(plain).__bases__ == (ToolFailure,) and str(plain) == "m"
    assert type(tool_failure("not a name", "m")) is ToolFailure
    for failure in (timeout, plain):  # a class made at replay time still pickles (a process pool's results)
        again = pickle.loads(pickle.dumps(failure))
        assert type(again) is type(failure) and (again.type, again.message, str(again)) == (
            failure.type,
            failure.message,
            str(failure),
        )
