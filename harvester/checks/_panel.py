"""The panel: the project's judges for one command, their verdict cache, and what they cost.

One ``Panel`` per replay or calibration. ``verdict`` asks a judge through the cache and counts: calls
(verdicts a judge was asked for), cache hits (verdicts that cost nothing), its tokens, and the judges
that failed to answer. A judge that raises or outlives its ``timeout`` fails its own check, with the
reason, and nothing else: a broken judge must not kill the suite. A judge runs with OpenTelemetry
instrumentation suppressed, so its model calls are not traced into the replay's run, and as harvester's
own work (``seam.own_work``), so the seal does not refuse them: the judge's call is not the agent's.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from pydantic import BaseModel, ConfigDict

from .. import seam
from ..config import Config
from ..errors import ConfigError
from ._agreement import calibration_problem, read_calibrations
from ._judge import BuiltJudge, Subject, Verdict, build_judge
from ._verdicts import CACHE_FILE, VerdictCache, judging_dir

__all__ = ["Panel", "Tally"]


class Tally(BaseModel):
    """One judge's bill for a command, as a report keeps it: ``calls`` it answered, ``cache_hits`` (verdicts
    that cost nothing), ``failures`` (raised or timed out), its tokens and their cost (None: no price for
    its model), and why it is not calibrated (None: it is)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str | None = None
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    uncalibrated: str | None = None


class Panel:
    """Judges by name, built and checked up front; ``verdict(name, subject)`` is ``(passed, reason)``."""

    def __init__(
        self,
        judges: Iterable[BuiltJudge],
        *,
        cache: VerdictCache | None = None,
        timeouts: Mapping[str, float] | None = None,
        config: Config | None = None,
        skipped: bool = False,
    ) -> None:
        self.skipped = skipped  # ``--no-judges``: no judge runs, and the report says the cases went unjudged
        self.judges = {j.name: j for j in judges}
        self.cache = cache if cache is not None else VerdictCache()
        self.timeouts = dict(timeouts or {})
        self.config = config or Config()
        self._tallies = {name: Tally(name=name, model=j.model) for name, j in self.judges.items()}
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls, config: Config, names: Iterable[str] | None = None, *, models: Mapping[str, Any] | None = None
    ) -> Panel:
        """The config's judges (only ``names`` when given), their cache under ``.harvester/``.

        ``models``: pydantic-ai models to use instead of the configured ones, by judge name.
        """
        wanted = list(config.judges) if names is None else list(dict.fromkeys(names))
        for name in wanted:
            if name not in config.judges:
                raise ConfigError(f"no judge {name!r} (defined: {', '.join(config.judges) or 'none'})", field="judges")
        built = [build_judge(n, config.judges[n], source=config.source, model=(models or {}).get(n)) for n in wanted]
        cache = VerdictCache(judging_dir(config) / CACHE_FILE)
        return cls(built, cache=cache, timeouts={n: config.judges[n].timeout for n in wanted}, config=config)

    def __contains__(self, name: object) -> bool:
        return name in self.judges

    def verdict(self, name: str, subject: Subject) -> tuple[bool, str]:
        """``(passed, reason)``; a judge that gave no verdict fails, its reason saying why."""
        verdict = self.ask(name, subject)
        return (False, verdict) if isinstance(verdict, str) else (verdict.passed, verdict.reason)

    def ask(self, name: str, subject: Subject) -> Verdict | str:
        """The verdict (from the cache when it has it), or why the judge gave none."""
        judge = self.judges[name]
        tally = self._tallies[name]
        key = judge.key(subject)
        cached = self.cache.get(key)
        if cached is not None:
            with self._lock:
                tally.cache_hits += 1
            return cached
        verdict, problem = _within(judge, subject, self.timeouts.get(name, 60.0))
        with self._lock:
            if verdict is None:
                tally.failures += 1
            else:
                tally.calls += 1
                tally.input_tokens += verdict.input_tokens
                tally.output_tokens += verdict.output_tokens
        if verdict is None:
            return problem
        self.cache.put(key, verdict)
        return verdict

    def uncalibrated(self, name: str) -> str | None:
        """Why the judge is not trusted yet (None: its agreement with the labels clears the floor)."""
        floor = self.config.calibration
        record = read_calibrations(self.config.calibration.file).get(name)
        return calibration_problem(record, self.judges[name].fingerprint, floor.min_kappa, floor.min_labels)

    def tallies(self) -> list[Tally]:
        """Each judge's bill, priced with the config's prices, and its calibration."""
        out = []
        for name, tally in self._tallies.items():
            usage = {"input_tokens": tally.input_tokens, "output_tokens": tally.output_tokens}
            tally.cost = self.config.cost(tally.model, usage) if self.judges[name].kind == "model" else None
            tally.uncalibrated = self.uncalibrated(name)
            out.append(tally.model_copy())
        return out


def _within(judge: BuiltJudge, subject: Subject, timeout: float) -> tuple[Verdict | None, str]:
    """The judge's verdict, or None and why not: it raised, or gave no verdict within ``timeout``."""
    box: list[Verdict | BaseException] = []

    def ask() -> None:
        token = otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # traced nowhere
        try:
            with seam.own_work():  # and not sealed
                box.append(judge.decide(subject))
        except BaseException as exc:  # reported as the judge's failure, on its check only
            box.append(exc)
        finally:
            otel_context.detach(token)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(ask,), daemon=True, name="harvester-judge")
    thread.start()
    thread.join(timeout)
    if not box:
        return None, f"judge {judge.name} gave no verdict within {timeout:g}s"
    result = box[0]
    if isinstance(result, BaseException):
        return None, f"judge {judge.name} raised {type(result).__name__}: {result}"
    return result, ""
