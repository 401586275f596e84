"""Judges in a replay: a model judge (pydantic-ai's ``FunctionModel``) and function judges, run last,
counted apart from the agent, cached, and a broken judge failing only its own check."""

from __future__ import annotations

import sys

import pytest

from harvester.checks import Panel, Subject, Tally, VerdictCache, build_judge
from harvester.config import Config, JudgeConfig
from harvester.errors import ConfigError
from harvester.harvest import case_from_run
from harvester.model import Run
from harvester.replay import replay
from harvester.report import Judging, Report, merge
from tests.builders import judges
from tests.builders.agents import GOOD, case, made_up
from tests.builders.judge_server import judge_server

EXPECTED = "Yes: returns are accepted within 30 days of delivery."


def _answer(prompt_text: str) -> str:
    """The agent's answer, as the judge's question quotes it."""
    return prompt_text.split("The agent answered:\n", 1)[1].split("\n\n", 1)[0]


def judged_case(id: str = "c1", **kw):
    return case(id, **{"required_elements": [], "expected": EXPECTED, "judges": ["equivalent"], **kw})


def model_panel(passes, **config):
    model, asked = judges.scripted_model(passes)
    judge = build_judge("equivalent", JudgeConfig(model="test", **config), model=model)
    return Panel([judge], config=Config(prices={"judge-model": {"input": 1.0, "output": 2.0}})), asked


def test_a_model_judge_passes_an_equivalent_answer_and_fails_a_different_one():
    panel, asked = model_panel(lambda text: "30 days" in _answer(text))
    good = replay([judged_case()], lambda: GOOD, judges=panel)
    bad = replay([judged_case()], made_up, judges=panel)
    (g,), (b,) = good.results, bad.results
    assert g.passed and g.checks[-1].name == "judge:equivalent" and g.checks[-1].passed
    assert not b.passed and b.failed_checks()[0].name == "judge:equivalent"
    assert b.failed_checks()[0].detail == "compared with the expected answer"
    assert all(EXPECTED in text for text in asked)  # the judge was shown what the case expects
    assert "Refunds within 30 days." in _answer(asked[0]) and "any time" in _answer(asked[1])


def test_the_judges_tokens_and_cost_are_counted_apart_from_the_agents():
    panel, _ = model_panel(lambda text: True)
    report = replay([judged_case()], lambda: GOOD, judges=panel)
    (use,) = report.judging.judges
    assert use.calls == 1 and use.cache_hits == 0 and use.input_tokens > 0 and use.output_tokens > 0
    assert use.cost == pytest.approx((use.input_tokens * 1.0 + use.output_tokens * 2.0) / 1000)
    assert report.cost_text() == "n/a"  # the agent's model has no price: the judge's cost is not in it
    line = report.judging.line()
    assert line.startswith("judges: 1 call, 0 cache hits") and "(not in the agent's cost)" in line
    assert line in report.summary() and line in report.to_markdown()


def test_a_judge_runs_only_when_every_other_check_passed():
    panel, asked = model_panel(lambda text: True)
    report = replay([judged_case(required_elements=["never said"])], lambda: GOOD, judges=panel)
    (r,) = report.results
    assert asked == [] and not any(c.name.startswith("judge:") for c in r.checks)
    assert report.judging.judges[0].calls == 0


def test_a_recovery_variant_is_not_judged():
    panel, asked = model_panel(lambda text: True)
    report = replay([judged_case()], lambda: GOOD, judges=panel, inject=True)
    assert len(asked) == 1 and report.variants
    assert all(not c.name.startswith("judge:") for r in report.variants for c in r.checks)


def test_a_second_run_of_an_unchanged_answer_makes_no_judge_call(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = Config(judges={"equivalent": JudgeConfig(function="tests.builders.judges:says_30_days")})
    judges.CALLS.clear()
    first = replay([judged_case()], lambda: GOOD, judges=Panel.from_config(config, ["equivalent"]))
    second = replay([judged_case()], lambda: GOOD, judges=Panel.from_config(config, ["equivalent"]))
    assert judges.CALLS == ["Refunds within 30 days."]  # asked once, across two panels: the cache is on disk
    assert (first.judging.judges[0].calls, first.judging.judges[0].cache_hits) == (1, 0)
    assert (second.judging.judges[0].calls, second.judging.judges[0].cache_hits) == (0, 1)
    assert second.results[0].checks[-1].detail == "states the 30-day window"
    assert (tmp_path / ".harvester" / "verdicts.jsonl").is_file()
    replay([judged_case(expected="Within thirty days.")], lambda: GOOD, judges=Panel.from_config(config))
    assert len(judges.CALLS) == 2  # a changed expected answer is a new question


def test_the_cache_skips_a_line_it_cannot_read(tmp_path):
    path = tmp_path / "verdicts.jsonl"
    path.write_bytes(b'{"key": "a", "passed": true, "reason": "ok"}\n{"key": "b", "pass\n')
    cache = VerdictCache(path)
    assert len(cache) == 1 and cache.get("a").passed


def test_a_judge_that_raises_fails_only_its_own_check():
    config = Config(
        judges={
            "broken": JudgeConfig(function="tests.builders.judges:broken"),
            "equivalent": JudgeConfig(function="tests.builders.judges:says_30_days"),
        }
    )
    panel = Panel.from_config(config)
    panel.cache = VerdictCache()  # in memory: nothing of this test on disk
    report = replay(
        [judged_case("broken-one", judges=["broken", "equivalent"]), judged_case("fine")], lambda: GOOD, judges=panel
    )
    broken, fine = report.results
    assert fine.passed
    (failed,) = broken.failed_checks()
    assert failed.name == "judge:broken" and failed.detail == "judge broken raised RuntimeError: grader backend down"
    assert [c.passed for c in broken.checks if c.name == "judge:equivalent"] == [True]
    assert {u.name: u.failures for u in report.judging.judges} == {"broken": 1, "equivalent": 0}
    assert "1 gave no verdict" in report.judging.line()


def test_a_judge_that_times_out_fails_its_check_with_the_reason():
    slow = build_judge("slow", JudgeConfig(function="tests.builders.judges:slow"))
    panel = Panel([slow], timeouts={"slow": 0.2})
    (r,) = replay([judged_case(judges=["slow"])], lambda: GOOD, judges=panel).results
    assert not r.passed and r.failed_checks()[0].detail == "judge slow gave no verdict within 0.2s"


@pytest.mark.slow
def test_a_slow_judge_is_not_the_agent_timing_out():
    slow = build_judge("slow", JudgeConfig(function="tests.builders.judges:slow"))  # 2 s
    (r,) = replay([judged_case(judges=["slow"])], lambda: GOOD, judges=Panel([slow]), timeout=0.3).results
    assert r.passed and r.error is None and r.checks[-1].detail == "too late"


def test_a_model_judge_at_a_base_url_answers_inside_a_sealed_replay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with judge_server(lambda question: "30 days" in _answer(question)) as (url, asked):
        judge = JudgeConfig(model=url.replace("127.0.0.1", "localhost"), model_name="judge-local")
        config = Config(judges={"eq": judge}, prices={"judge-local": {"input": 1.0, "output": 1.0}})
        good = replay([judged_case(judges=["eq"])], lambda: GOOD, judges=Panel.from_config(config))
        bad = replay([judged_case(judges=["eq"])], made_up, judges=Panel.from_config(config))
    assert good.sealed and good.refused == 0 and len(asked) == 2
    assert good.results[0].passed and good.results[0].checks[-1].detail == "same facts"
    assert not bad.results[0].passed and bad.results[0].failed_checks()[0].name == "judge:eq"
    (use,) = good.judging.judges
    assert (use.model, use.input_tokens, use.output_tokens, use.cost) == ("judge-local", 50, 8, 0.058)


def test_without_a_panel_the_cases_judges_do_not_run():
    (r,) = replay([judged_case()], lambda: GOOD).results
    assert r.passed and not any(c.name.startswith("judge:") for c in r.checks)


@pytest.mark.parametrize(
    ("config", "field", "needle"),
    [
        (JudgeConfig(function="no_such_module_x:fn"), "judges.j.function", "does not import"),
        (JudgeConfig(function="tests.builders.judges:one_argument"), "judges.j.function", "must take (case, run)"),
        (JudgeConfig(model="nosuchprovider:model-x"), "judges.j.model", "Unknown model"),
        (JudgeConfig(model="test", rubric_file="/nonexistent/rubric.md"), "judges.j.rubric_file", "no such file"),
        (JudgeConfig(model="test", question="follows"), "judges.j", "needs a rubric"),
        (JudgeConfig(model="http://127.0.0.1:9/v1"), "judges.j.model", "needs model_name"),
    ],
)
def test_a_judge_that_cannot_be_built_names_its_field(config, field, needle):
    with pytest.raises(ConfigError) as err:
        build_judge("j", config, source="harvester.toml")
    assert err.value.field == field and needle in str(err.value)


def test_a_model_judge_without_pydantic_ai_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # as if it were not installed
    with pytest.raises(ConfigError) as err:
        build_judge("j", JudgeConfig(model="openai:gpt-4.1-mini"), source="harvester.toml")
    assert err.value.field == "judges.j.model" and "a model judge needs pydantic-ai: pip install" in str(err.value)
    assert build_judge("f", JudgeConfig(function="tests.builders.judges:says_30_days")).kind == "function"


def test_a_grounded_judge_reads_the_recorded_tool_results_and_an_equivalent_one_needs_expected():
    model, asked = judges.scripted_model(lambda text: True)
    grounded = build_judge("g", JudgeConfig(model="test", question="grounded"), model=model)
    spec = case()
    grounded.decide(Subject.of(spec, Run(trace_id="t", prompt=spec.prompt, answer="30 days")))
    assert "The tool results:\nRefunds within 30 days." in asked[0]
    equivalent = build_judge("e", JudgeConfig(model="test"), model=model)
    verdict = equivalent.decide(Subject.of(spec, Run(trace_id="t", prompt=spec.prompt, answer="30 days")))
    assert not verdict.passed and "no expected answer" in verdict.reason and len(asked) == 1


def test_a_harvested_case_with_expected_gets_the_default_judge():
    config = Config(judges={"eq": JudgeConfig(function="tests.builders.judges:says_30_days")}, default_judge="eq")
    run = Run(trace_id="a" * 32, prompt="Can I return it?", answer="Yes.", stop="answered")
    assert case_from_run(run, config=config, expected="Yes, within 30 days.").judges == ["eq"]
    assert case_from_run(run, config=config).judges == []


def test_shard_reports_sum_their_judges():
    def part(calls: int, hits: int) -> Report:
        use = Tally(name="eq", calls=calls, cache_hits=hits, input_tokens=10, cost=0.5)
        return Report(shard=f"{calls}/2", judging=Judging(judges=[use]))

    merged = merge([part(1, 4), part(2, 3)])
    (use,) = merged.judging.judges
    assert (use.calls, use.cache_hits, use.input_tokens, use.cost) == (3, 7, 20, 1.0)
