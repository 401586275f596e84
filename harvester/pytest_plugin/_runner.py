"""What an item and the ``harvester_case`` fixture share: the project's settings resolved as the CLI
resolves them, and one case (or one recovery variant of it) replayed into a redacted ``CaseResult``.

Kept apart from the hooks so the fixture works in a run without ``--harvester-agent`` (``agent=``), and so
each item replays exactly its own case: one ``replay`` call per item, which is what lets ``-k``, ``-x``
and xdist pick, stop and spread cases as they do ordinary tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ..case import AgentCase, CaseFolder
from ..checks import Panel
from ..config import MODEL_MODES, Config, ModelMode, load_config
from ..errors import HarvesterError, InputError
from ..fixtures import MODES
from ..redact import Redactor, redaction_for
from ..replay import load_agent, recovery_variants, replay, variant_case
from ..report import CaseResult, Injected, Report, redacted

__all__ = ["CaseRunner", "Settings", "failure_text"]


@dataclass
class Settings:
    """The options, then ``$HARVESTER_CASES``, then the config's ``cases_dir`` (as ``harvester replay``)."""

    config: Config
    folder: CaseFolder
    trials: int
    timeout: float
    inject: bool
    model: ModelMode = "live"

    @classmethod
    def from_pytest(cls, pconfig: pytest.Config) -> Settings:
        """Raises ``HarvesterError`` (a config file that is wrong) or ``ValueError`` (an option out of range)."""
        trials, timeout = pconfig.getoption("harvester_trials"), pconfig.getoption("harvester_timeout")
        if trials < 1:
            raise ValueError(f"--harvester-trials {trials}: must be >= 1")
        if not timeout > 0:
            raise ValueError(f"--harvester-timeout {timeout:g}: must be > 0")
        config = load_config(pconfig.getoption("harvester_config"))
        config.import_plugins()  # custom checks must exist before cases load
        folder = CaseFolder.for_project(config, pconfig.getoption("harvester_cases"))
        model = pconfig.getoption("harvester_model") or config.replay.model
        if model not in MODEL_MODES:
            raise ValueError(f"--harvester-model {model}: expected one of {', '.join(MODEL_MODES)}")
        return cls(config, folder, trials, timeout, bool(pconfig.getoption("harvester_inject")), model)


class CaseRunner:
    """Replays one case against fresh agents from ``build``; called as the ``harvester_case`` fixture."""

    def __init__(self, settings: Settings, build: Callable[..., Any] | None, suite: Any = None) -> None:
        self.settings, self.build, self._suite = settings, build, suite
        self._redactor = Redactor.from_option(redaction_for(settings.config))

    @classmethod
    def for_config(cls, pconfig: pytest.Config) -> CaseRunner:
        from . import PLUGIN

        state = pconfig.pluginmanager.get_plugin(PLUGIN)
        if state is not None:
            return state.runner
        try:
            return cls(Settings.from_pytest(pconfig), None)
        except (HarvesterError, ValueError) as exc:
            error = f"harvester_case: {exc}"
        pytest.fail(error, pytrace=False)

    def suite(self) -> Any:
        """The suite manifest a report records (read once, when the first case runs)."""
        if self._suite is None:
            from ..suite import suite_info

            self._suite = suite_info(self.settings.folder.root)
        return self._suite

    def __call__(
        self,
        case_id: str,
        *,
        agent: str | Callable[..., Any] | None = None,
        trials: int | None = None,
        inject: str | None = None,
    ) -> CaseResult:
        """The ``CaseResult`` of ``case_id`` (any status) replayed now; ``inject``: one failure mode
        (``timeout``, ``rate_limit``...) on the case's first tool, as ``harvester replay --inject`` does."""
        try:
            build = load_agent(agent) if isinstance(agent, str) else agent or self.build
            if build is None:
                raise InputError(
                    "no agent: run pytest with --harvester-agent MODULE:ATTR or call harvester_case(ID, agent=...)"
                )
            spec = self.settings.folder.load(case_id)
            if inject is None:
                return self.run(spec, None, build=build, trials=trials)
            if inject not in MODES:
                raise InputError(f"inject={inject!r}: not a failure mode (one of {', '.join(MODES)})")
            variants = recovery_variants(spec, (inject,))
            if not variants:
                raise InputError(f"case {case_id!r} calls no tool: there is nothing to inject a failure into")
            return self.run(variants[0], spec.id, build=build, trials=trials)
        except HarvesterError as exc:
            error = f"harvester_case({case_id!r}): {exc}"
        pytest.fail(error, pytrace=False)  # outside the handler: one line, no chained exception

    def run(
        self,
        spec: AgentCase,
        variant_of: str | None,
        *,
        build: Callable[..., Any] | None = None,
        trials: int | None = None,
    ) -> CaseResult:
        """One case (or, with ``variant_of``, one recovery variant of that case) replayed and redacted."""
        s = self.settings
        factory = build or self.build
        assert factory is not None, "CaseRunner.run needs an agent factory"
        report = replay(
            [spec if variant_of is None else variant_case(spec)],
            factory,
            trials=trials or s.trials,
            timeout=s.timeout,
            concurrency=1,
            suite=self.suite(),
            prices=s.config if s.config.prices else None,
            ignore_args=s.config.ignore_args,
            allow_hosts=s.config.replay.allow_hosts,
            allow_commands=s.config.replay.allow_commands,
            model=s.model,
            # its judges, with the project's verdict cache; a recovery variant is not judged
            judges=Panel.from_config(s.config, spec.judges) if spec.judges and variant_of is None else None,
        )
        [result] = report.results
        if variant_of is not None:  # what replay(inject=True) records of a variant it planned itself
            tool, inj = next(iter(spec.inject_failures.items()))
            result = result.model_copy(
                update={"variant_of": variant_of, "injected": Injected(tool=tool, mode=inj.mode)}
            )
        return redacted(result, self._redactor)

    def report(self, results: list[CaseResult]) -> Report:
        suite = self.suite()
        return Report(
            suite=suite.name, suite_version=suite.version, trials=self.settings.trials, results=results, refused=0
        )


def failure_text(result: CaseResult, headline: str) -> str:
    """What a failing item shows instead of a traceback: the headline, why the case exists, each failed
    check (or the agent's error) and how the replay left its recording."""
    lines = [headline]
    if result.why:
        lines.append(f"  why: {result.why}")
    if result.injected is not None:
        lines.append(f"  injected: {result.injected.mode} on {result.injected.tool}")
    reasons = [f"  {' '.join(reason.split())}" for reason in result.reasons()]  # one line: psycopg's run to two
    lines += reasons or ["  (no check failed in the trial shown)"]
    differences = result.differences()
    if differences:
        lines.append(f"  divergence: {differences}")
    if result.answer is not None:
        answer = " ".join(result.answer.split())
        lines.append(f"  answer: {answer if len(answer) <= 200 else answer[:197] + '...'}")
    return "\n".join(lines)
