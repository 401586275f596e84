"""One pytest run with ``--harvester-agent``: the cases folder as a collector, each case an item, each
item's verdict (against the baseline when one is given), and the report written at the end.

Every item's ``CaseResult`` travels on its test report (``report.harvester_result``, plain JSON), so
the process that writes ``--harvester-report`` sees every result whether the items ran here or on
pytest-xdist workers: xdist serializes a report's attributes to the controller, and only the controller
(no ``config.workerinput``) writes files.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .._files import shown_path
from ..case import AgentCase
from ..errors import CaseFileError, HarvesterError, InputError, OutputError
from ..replay import load_agent, recovery_variants
from ..report import (
    CaseResult,
    GateOutcome,
    Report,
    check_output,
    evaluate_gates,
    failed_too_text,
    render_html,
    write_file,
)
from ._runner import CaseRunner, Settings, failure_text

__all__ = ["CaseFailed", "CaseItem", "CasesCollector", "HarvesterSession"]


class CaseFailed(Exception):
    """A case that failed (or regressed): its text is the item's whole failure report."""


class CasesCollector(pytest.Collector):
    """The cases folder: one item per accepted case (and per recovery variant with ``--harvester-inject``)."""

    state: HarvesterSession

    def collect(self) -> Iterator[pytest.Item]:
        folder = self.state.runner.settings.folder
        try:  # validates every accepted file, as harvester replay does: a broken one is an error now
            accepted = folder.accepted()
        except InputError as exc:
            if not isinstance(exc, CaseFileError):
                self.state.empty = f"harvester: {exc.message}"
                return
            raise
        for case in accepted:
            yield self._item(case, None)
            if self.state.runner.settings.inject:
                for variant in recovery_variants(case):
                    yield self._item(variant, case.id)

    def _item(self, case: AgentCase, variant_of: str | None) -> CaseItem:
        for tag in case.tags:  # registered first: --strict-markers accepts a case's tags
            if tag not in self.state.markers:
                self.state.markers.add(tag)
                self.config.addinivalue_line("markers", f"{tag}: harvester case tag")
        item = CaseItem.from_parent(self, name=case.id, path=self.path / f"{variant_of or case.id}.json")
        item.spec, item.variant_of, item.state = case, variant_of, self.state
        for tag in case.tags:
            item.add_marker(tag)
        return item

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, HarvesterError):
            return f"harvester: {excinfo.value}"
        return super().repr_failure(excinfo)


class CaseItem(pytest.Item):
    """One accepted case (or one recovery variant of it), replayed when the item runs."""

    spec: AgentCase
    variant_of: str | None
    state: HarvesterSession
    result: CaseResult | None = None

    def runtest(self) -> None:
        self.result = self.state.runner.run(self.spec, self.variant_of)
        outcome, text = self.state.judge(self.result)
        if outcome == "xfail":
            pytest.xfail(text)
        if outcome == "failed":
            raise CaseFailed(text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        if isinstance(excinfo.value, HarvesterError):
            return f"harvester: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"harvester case {self.name}"


class HarvesterSession:
    """The plugin's state and hooks for one run; registered only when ``--harvester-agent`` is given."""

    def __init__(self, config: pytest.Config, runner: CaseRunner, baseline: Report | None) -> None:
        self.config, self.runner, self.baseline = config, runner, baseline
        self.markers: set[str] = set()
        self.results: list[dict[str, Any]] = []
        self.empty: str | None = None
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.written: list[str] = []

    @classmethod
    def from_config(cls, config: pytest.Config) -> HarvesterSession:
        """Everything a typo can break, checked before anything is collected: one usage error line each."""
        spec = config.getoption("harvester_agent")
        try:
            settings = Settings.from_pytest(config)
            base_path = config.getoption("harvester_baseline")
            baseline = Report.load(base_path) if base_path else None
            if baseline is not None:  # every item is judged against it: held in memory, not re-read per item
                baseline.results = list(baseline.results)
            if not hasattr(config, "workerinput"):  # only the controller writes them
                for kind, out in _outputs(config).items():
                    try:
                        check_output(out)
                    except OutputError as exc:
                        raise pytest.UsageError(f"--harvester-{kind} {exc}") from None
            build = _load_sealed(spec, settings)
        except (HarvesterError, ValueError) as exc:  # the option as this run spells it
            raise pytest.UsageError(str(exc).replace("--agent ", "--harvester-agent ", 1)) from None
        return cls(config, CaseRunner(settings, build), baseline)

    # -- collection ------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[None]:
        """The session's children, then the cases folder: its cases collect (or fail to) like a test file."""
        report: Any = yield
        if isinstance(collector, pytest.Session) and report.passed:
            root = self.runner.settings.folder.root
            try:
                nodeid = Path(os.path.relpath(root.resolve(), self.config.rootpath)).as_posix()
            except ValueError:  # another drive
                nodeid = root.resolve().as_posix()
            if nodeid.startswith("../"):
                nodeid = root.resolve().as_posix()
            node = CasesCollector.from_parent(collector, name=nodeid, path=root.resolve(), nodeid=nodeid)
            node.state = self
            report.result.append(node)
        return report

    def pytest_report_collectionfinish(self) -> list[str]:
        return [self.empty] if self.empty else []

    # -- verdicts --------------------------------------------------------------------------------
    def judge(self, result: CaseResult) -> tuple[str, str]:
        """``passed``, ``failed`` or ``xfail`` (failing in the baseline too), and the text to show."""
        trials = f"passed {result.passes} of {result.trials} trial{'s' * (result.trials != 1)}"
        failed = failure_text(result, f"harvester case {result.id} failed ({trials})")
        if self.baseline is None:
            return ("passed", "") if result.passed and not result.unauthorised else ("failed", failed)
        alone = Report(suite=self.baseline.suite, suite_version=self.baseline.suite_version, results=[result])
        comparison = alone.compare(self.baseline)
        before = next((b for b in self.baseline.results if b.id == result.id), None)
        where = self.config.getoption("harvester_baseline")
        if result.id in comparison.regressed and before is not None:
            there = f"passed {before.passes} of {before.trials} there"
            head = f"harvester case {result.id} regressed against {where}: {there}, now {trials}"
            return "failed", failure_text(result, head)
        if result.id in comparison.inconclusive:
            head = (
                f"harvester case {result.id} dropped against {where}, inconclusively: {comparison.decides[result.id]}"
            )
            return "failed", failure_text(result, head)
        if result.passed and not result.unauthorised:
            return "passed", ""
        if before is None or result.unauthorised:  # new since the baseline; unauthorised_actions<=0 is always on
            return "failed", failed
        return "xfail", f"failing in the baseline too (passed {before.passes} of {before.trials} there, now {trials})"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report: Any = yield
        result = getattr(item, "result", None)
        if call.when == "call" and isinstance(item, CaseItem) and result is not None:
            report.harvester_result = result.model_dump(mode="json")
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "harvester_result", None)
        if report.when == "call" and data:
            self.results.append(data)

    # -- the end ---------------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The floor on every item's result, then each requested file; a floor not met, or a file that
        cannot be written, fails the run."""
        outputs = _outputs(self.config)
        if hasattr(self.config, "workerinput") or not self.results:
            return
        results = [CaseResult.model_validate(d) for d in self.results]  # redacted already, case by case
        results.sort(key=lambda r: (r.variant_of or r.id, r.variant_of is not None, r.id))
        try:
            report = self.runner.report(results)
        except HarvesterError as exc:
            self.errors.append(f"harvester: error: {exc}")
            report = Report(results=results)
        outcome, below = self._judge_suite(report)
        for kind, out in outputs.items():
            try:
                if kind == "report":
                    report.save(out)
                else:
                    write_file(out, render_html(report, self.baseline, outcome).encode(), atomic=True)
            except OutputError as exc:
                self.errors.append(f"harvester: error: {exc}")
            else:
                self.written.append(out)
        if (self.errors or below) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _judge_suite(self, report: Report) -> tuple[GateOutcome, bool]:
        """The items as one suite, for the one gate pytest applies: the config's floor on task_completion
        (True: not met). A case failing in the baseline too only xfails: without the floor a red suite
        against a red baseline would pass. Items that are all recovery variants (``-k``) have no rate."""
        floor = self.runner.settings.config.replay.min_task_completion
        outcome = evaluate_gates(report, (), self.baseline, min_task_completion=floor)
        failed_too = outcome.comparison.failed_too if outcome.comparison is not None else []
        if failed_too:
            self.notes.append(f"harvester: {failed_too_text(len(failed_too))} (xfail)")
        below = [g for g in outcome.gates if g.floor and g.value is not None and not g.passed]
        self.notes += [f"harvester: {g.summary()}" for g in below]
        return outcome, bool(below)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        empty = self.empty
        if empty is None and not self.results and self.config.pluginmanager.hasplugin("dsession"):
            empty = _why_empty(self.runner)  # the workers collected; say here what they found
        lines = [empty] if empty else []
        if self.written:
            lines.append(f"harvester: {len(self.results)} case results written to {', '.join(self.written)}")
        for line in lines + self.notes + self.errors:
            terminalreporter.write_line(line)


def _outputs(config: pytest.Config) -> dict[str, str]:
    given = {kind: config.getoption(f"harvester_{kind}") for kind in ("report", "html")}
    return {kind: path for kind, path in given.items() if path}


def _why_empty(runner: CaseRunner) -> str | None:
    folder = runner.settings.folder
    try:
        accepted = folder.ids_with("accepted")  # each file read lightly
    except HarvesterError:
        return None  # the collection error says it
    if accepted:
        return None
    return f"harvester: no accepted cases in {shown_path(folder.root)}/"


def _load_sealed(spec: str, settings: Settings) -> Any:
    """The agent's module imported sealed, as ``harvester replay`` imports it (allowing the config's
    hosts and commands): a connection it opened at import would be open before any case's seal, and
    what the cases send on it never checked. pytest's process is unsealed again after the import."""
    replay = settings.config.replay
    return load_agent(spec, seal=True, allow_hosts=replay.allow_hosts, allow_commands=replay.allow_commands)
