"""The shipped example: ``cases/`` replays green against the example agent and is what ``traces/`` harvests to."""

from pathlib import Path

from harvester.case import load_cases
from harvester.demo import agent as support
from harvester.replay import replay
from harvester.suite import suite_info

from .example_suite import CASES, TRACES, harvest_traces

# What a reviewer may change on a harvested case; everything else must be reproducible from traces/.
REVIEW_FIELDS = {"id", "status", "why", "tags", "expected", "required_elements", "rejected_why"}


def test_cases_replay_green_against_the_example_agent():
    cases = load_cases(CASES, status="accepted")
    assert {c.id for c in cases} == {"order-a1002", "return-order-a1001-refund-policy", "injection-contained"}
    report = replay(cases, support.build, suite=suite_info(CASES))
    assert report.passed == 3, report.summary()
    assert all(r.no_fixture == 0 and r.divergence is None for r in report.results)
    assert report.suite == "support-demo" and report.suite_version == "1.0.0"


def test_reharvesting_traces_reproduces_cases(tmp_path: Path):
    harvest_traces(TRACES, tmp_path)
    fresh = {c.source.trace_id: c for c in load_cases(tmp_path)}
    shipped = {c.source.trace_id: c for c in load_cases(CASES)}
    assert fresh.keys() == shipped.keys()
    for trace_id, case in shipped.items():
        assert fresh[trace_id].model_dump(exclude=REVIEW_FIELDS) == case.model_dump(exclude=REVIEW_FIELDS), case.id
