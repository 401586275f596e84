"""From a stored run to a reviewable regression case.

``case_from_run`` freezes what one run did: every executed tool call becomes a fixture (so replay
is deterministic), the successful distinct calls give ``min_steps``, mutating tools the run did not
need become ``forbidden_tools``, and the failure kind names what the case protects against.
``harvest`` streams a whole store through it, folding runs with one ``signature`` into one case.

Failure kinds, by precedence (the first that applies wins; the order goes from what did damage, to
how the run ended, to what merely contributed, to a flag with nothing mechanical behind it):

1. ``unintended_action``  an incident run executed a mutating or ``--forbid`` tool
2. ``blocked_action``     the model requested a call that was denied (status ``blocked``)
3. ``loop``               stop ``loop_detected``, or one call (same fixture key) made 3+ times
4. ``budget_exceeded``    stop ``budget_exceeded``
5. ``max_steps``          stop ``max_steps``
6. ``exception``          stop ``error`` or a run-level error
7. ``tool_error``         a tool call failed
8. ``abstained``          a flagged run (incident or negative feedback) whose answer abstains
9. ``negative_feedback``  flagged negative (feedback or the incident command), nothing else visible

An unflagged run that abstains is not a failure: its abstention is the behaviour to keep, so its
case checks ``abstained`` instead of ``answered``.
"""

from __future__ import annotations

import fnmatch
import heapq
import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import orjson

from . import checks as checklib
from .canonical import digest, fixture_key
from .case import AgentCase, CaseFolder, Fixture, Recorded, Source, case_files, load_case, save_case
from .config import Config
from .errors import CaseFileError
from .model import ErrorInfo, Run

FAILURE_KINDS: tuple[str, ...] = ("unintended_action", "blocked_action", "loop", "budget_exceeded", "max_steps",
                                  "exception", "tool_error", "abstained", "negative_feedback")
LOOP_REPEATS = 3  # the same call this many times is a loop
COST_HEADROOM = 2.0  # max_cost = recorded cost x this, so ordinary variance never fails a case
SLUG_MAX = 48
SLUG_WORDS = 6

_STOP_STOPS = {"loop_detected": "loop", "budget_exceeded": "budget_exceeded", "max_steps": "max_steps"}
_ABSTAINED = checklib.abstained()
_STOPWORDS = frozenset(
    "a an the to of for and or in on at by is are was were be been am can could would should will shall may "
    "might must i me my mine we us our you your it its this that these those with from do does did how what "
    "when where which who whom why hi hello hey please pls just still also there here so if then than as "
    "about into up out any some have has had get got let lets im ive dont".split())


@dataclass(slots=True)
class _Reading:
    """What the harvest needs to know about one run, computed once (keys hash every argument)."""

    keys: list[str]
    kind: Optional[str]
    detail: str
    unintended: list[str]  # tools that should not have run (incident only)
    abstains: bool


def _read(run: Run, config: Config, *, incident: bool, forbid: Iterable[str]) -> _Reading:
    ignore = config.ignore_args
    keys = [fixture_key(c.name, c.args, ignore.get(c.name, ())) for c in run.calls]
    abstains = bool(run.answer) and _ABSTAINED(run)[0]
    forbid = set(forbid)
    unintended: list[str] = []
    if incident:
        unintended = list(dict.fromkeys(
            c.name for c in run.calls if c.status != "blocked" and (c.name in forbid or config.is_mutating(c.name))))
    kind, detail = _failure(run, keys, unintended, abstains, flagged=incident or run.feedback == "negative")
    return _Reading(keys, kind, detail, unintended, abstains)


def _failure(run: Run, keys: list[str], unintended: list[str], abstains: bool,
             flagged: bool) -> tuple[Optional[str], str]:
    """(kind, what was seen) in the module docstring's precedence; (None, "") for a run that went fine."""
    calls = run.calls
    if unintended:
        step = next(i for i, c in enumerate(calls, 1) if c.name in unintended and c.status != "blocked")
        return "unintended_action", f"{', '.join(unintended)} executed (first at step {step})"
    for step, call in enumerate(calls, 1):
        if call.status == "blocked":
            return "blocked_action", f"{call.name} was requested and denied at step {step}"
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    repeated = max(counts, key=counts.__getitem__) if counts else None
    if run.stop == "loop_detected" or (repeated is not None and counts[repeated] >= LOOP_REPEATS):
        if repeated is not None and counts[repeated] >= LOOP_REPEATS:
            return "loop", f"{repeated.split(':', 1)[0]} called {counts[repeated]} times with the same arguments"
        return "loop", "stopped with loop_detected"
    if run.stop in ("budget_exceeded", "max_steps"):
        return _STOP_STOPS[run.stop], f"stopped with {run.stop} after {run.steps} steps"
    if run.stop == "error" or run.error is not None:
        err = run.error
        return "exception", f"{err.type}: {err.message}" if err else "stopped with error"
    for step, call in enumerate(calls, 1):
        if call.status == "error":
            err = call.error
            what = f"{err.type}: {err.message}" if err else "error"
            return "tool_error", f"{call.name} failed at step {step} ({what})"
    if flagged and abstains:
        return "abstained", f"abstained: {(run.answer or '')[:80]!r}"
    if flagged:
        return "negative_feedback", "flagged negative"
    return None, ""


def failure_kind(run: Run, *, config: Config | None = None, incident: bool = False,
                 forbid: Iterable[str] = ()) -> Optional[str]:
    """The failure kind of ``run`` (see the module docstring for the precedence), or None."""
    return _read(run, config or Config(), incident=incident, forbid=forbid).kind


# -- signature and ids ------------------------------------------------------------------------
_DIGITS = re.compile(r"\d+")
_NON_WORD = re.compile(r"[\W_]+")


def normalize_prompt(text: str | None) -> str:
    """Casefolded, digits collapsed to 0, punctuation dropped, whitespace single: order A1001 ~ order a1002."""
    folded = _DIGITS.sub("0", (text or "").casefold())
    return " ".join(_NON_WORD.sub(" ", folded).split())


def _signature(run: Run, kind: Optional[str]) -> str:
    return digest([normalize_prompt(run.prompt), run.trajectory(), kind])


def signature(run: Run, *, config: Config | None = None) -> str:
    """16 hex identifying "the same situation": normalized prompt + trajectory + failure kind.

    Runs with one signature are one case (``source.seen`` counts them), so a failure that happens a
    thousand times a night is reviewed once.
    """
    return _signature(run, failure_kind(run, config=config))


def slug(text: str | None, fallback: str = "case") -> str:
    """A short file-safe id from a prompt: ascii, lowercase, hyphens, a few meaningful words, <= 48 chars."""
    ascii_text = unicodedata.normalize("NFKD", text or "").encode("ascii", "ignore").decode().casefold()
    words = re.findall(r"[a-z0-9]+", ascii_text.replace("'", ""))
    meaningful = [w for w in words if w not in _STOPWORDS] or words
    out = ""
    for word in meaningful[:SLUG_WORDS]:
        candidate = f"{out}-{word}" if out else word
        if len(candidate) > SLUG_MAX:
            break
        out = candidate
    return out or fallback[:SLUG_MAX]


# -- one run to one case ----------------------------------------------------------------------
def case_from_run(run: Run, *, config: Config | None = None, why: str | None = None, expected: str | None = None,
                  required_elements: Iterable[str] = (), forbid: Iterable[str] = (), tags: Iterable[str] = (),
                  incident: bool = False) -> AgentCase:
    """Freeze ``run`` into a pending case (id = a slug of the prompt; make it unique with ``CaseFolder``).

    ``incident`` marks the run as one someone reported: its failure kind is at least
    ``negative_feedback`` and the mutating tools it executed (plus ``forbid``) become forbidden.
    """
    config = config or Config()
    forbid = list(forbid)
    reading = _read(run, config, incident=incident, forbid=forbid)
    return _build(run, reading, config, why=why, expected=expected, required_elements=required_elements,
                  forbid=forbid, tags=tags)


def _build(run: Run, reading: _Reading, config: Config, *, why: str | None = None, expected: str | None = None,
           required_elements: Iterable[str] = (), forbid: Iterable[str] = (), tags: Iterable[str] = ()) -> AgentCase:
    unintended = set(reading.unintended) | set(forbid)
    notes: list[str] = []
    fixtures: list[Fixture] = []
    ignore_args: dict[str, list[str]] = {}
    needed: set[str] = set()  # tools the run executed for its task (ok or failed)
    distinct_ok: set[str] = set()
    appropriate: list[str] = []
    hidden = 0
    for call, key in zip(run.calls, reading.keys):
        if call.status == "blocked":
            continue
        if call.name in config.ignore_args:
            ignore_args[call.name] = config.ignore_args[call.name]
        ok = call.status == "ok"
        fixtures.append(Fixture(key=key, tool=call.name, args=call.args, result=call.result if ok else None,
                                error=None if ok else (call.error or ErrorInfo(type="error")),
                                truncated=call.truncated))
        if call.truncated:
            notes.append(f"fixture {len(fixtures) - 1} ({key}): the result was truncated by the OTel attribute "
                         "length limit; paste the full result (or raise the limit) before accepting")
        if call.args is None:
            hidden += 1
        if call.name in unintended:
            continue
        needed.add(call.name)
        if ok:
            distinct_ok.add(key)
            if call.name not in appropriate:
                appropriate.append(call.name)
    if not run.content_captured or hidden:
        notes.append("payloads were not captured (content capture off): the fixtures are incomplete; fill in "
                     "args and results, or re-capture with content on, before accepting")
    if not run.prompt:
        notes.append("the prompt was not captured: write it before accepting")

    cost = run.cost if run.cost is not None else (config.cost(run.model, run.usage) if run.usage.total else None)
    kind = reading.kind
    should_abstain = (reading.abstains and kind is None) or (
        bool(expected) and _ABSTAINED(Run(trace_id=run.trace_id, answer=expected))[0])
    return AgentCase(
        id=slug(run.prompt, fallback=f"run-{run.trace_id[:8]}"),
        status="pending",
        why=why or _default_why(run, kind, reading.detail),
        prompt=run.prompt or "",
        expected=expected,
        required_elements=list(dict.fromkeys(required_elements)),
        checks=[{"check": "abstained" if should_abstain else "answered"}],
        min_steps=len(distinct_ok),
        appropriate_tools=appropriate,
        forbidden_tools=_forbidden(config, run, needed, reading.unintended, forbid),
        max_cost=_with_headroom(cost),
        tags=list(dict.fromkeys([*(("regression", kind) if kind else ("typical",)), *tags])),
        ignore_args=ignore_args,
        fixtures=fixtures,
        review_notes=notes,
        recorded=Recorded(trajectory=run.trajectory(), denied=_denied(run), stop=run.stop, answer=run.answer,
                          steps=run.steps, cost=cost),
        source=Source(trace_id=run.trace_id, run_id=run.run_id, captured_at=run.started_at, last_seen=run.started_at, agent=run.agent,
                      failure_kind=kind, seen=1,
                      signature=_signature(run, kind)),
    )


def _denied(run: Run) -> list[str]:
    return list(dict.fromkeys(c.name for c in run.calls if c.status == "blocked"))


def _forbidden(config: Config, run: Run, needed: set[str], unintended: list[str], forbid: list[str]) -> list[str]:
    """Mutating tools the run did not need, tools it was denied, the ones an incident should not have
    run, and ``--forbid``. A request denied in production is a line a replay must not cross.

    ``never_used`` compares exact names, so a glob pattern is expanded to the tools this run requested.
    """
    out: list[str] = []
    for pattern in config.mutating_tools:
        if any(ch in pattern for ch in "*?["):
            out.extend(t for t in run.requested_tools() if fnmatch.fnmatchcase(t, pattern) and t not in needed)
        elif pattern not in needed:
            out.append(pattern)
    denied = [t for t in _denied(run) if t not in needed]
    return list(dict.fromkeys([*out, *denied, *unintended, *forbid]))


def _with_headroom(cost: float | None) -> float | None:
    """Recorded cost x ``COST_HEADROOM``, rounded up to two significant digits (0.0042 -> 0.0084)."""
    if not cost or cost <= 0:
        return None
    limit = cost * COST_HEADROOM
    quantum = 10.0 ** (math.floor(math.log10(limit)) - 1)
    return float(f"{math.ceil(limit / quantum - 1e-9) * quantum:.12g}")


def _default_why(run: Run, kind: Optional[str], detail: str) -> str:
    if kind:
        return f"{kind}: {detail}"
    path = " -> ".join(run.trajectory()) or "no tools"
    return f"typical {run.agent or 'agent'} run ({path})"


# -- a whole store ----------------------------------------------------------------------------
@dataclass
class HarvestResult:
    runs: int = 0
    new: int = 0  # cases written
    updated: int = 0  # existing pending cases whose ``seen`` grew
    skipped: int = 0  # runs whose signature belongs to a reviewed (accepted/rejected) case
    counted: int = 0  # runs an earlier harvest already counted in a pending case's ``seen``
    new_ids: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return self.new + self.updated

    def summary(self) -> str:
        counted = f", {self.counted} already counted" if self.counted else ""
        return (f"harvested {self.runs} runs into {self.cases} cases "
                f"(new {self.new}, updated {self.updated}, skipped {self.skipped} reviewed{counted})")

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "cases": self.cases, "new": self.new, "updated": self.updated,
                "counted": self.counted,
                "skipped": self.skipped, "new_ids": self.new_ids}


def _signature_index(folder: CaseFolder, runs: set[tuple[str, str]] | None = None) -> dict[str, tuple[str, Path, Optional[str]]]:
    """signature -> (status, file, last_seen) of the cases already there; a light read (no validation) per file.

    ``runs`` is filled with the cases' source (trace id, run id): a run ``harvester incident`` already
    made into a case has another signature (the incident's failure kind), and must not come back as a
    twin. The run id matters: a trace can hold several runs, each its own case.
    """
    index: dict[str, tuple[str, Path, Optional[str]]] = {}
    for path in case_files(folder.root):
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise CaseFileError(f"invalid JSON ({exc})", file=str(path)) from None
        source = (data.get("source") or {}) if isinstance(data, dict) else {}
        sig = source.get("signature")
        if runs is not None and isinstance(source.get("trace_id"), str) and isinstance(source.get("run_id"), str):
            runs.add((source["trace_id"], source["run_id"]))
        if sig:
            last = source.get("last_seen") or source.get("captured_at")
            index.setdefault(sig, (str(data.get("status", "pending")), path, last))
    return index


def _sample_priority(run: Run) -> int:
    """A reproducible pseudo-random order, so the same store always yields the same sample."""
    return int(digest([run.trace_id, run.run_id], length=12), 16)


def harvest(store: Any, cases_dir: str | Path, *, failed_only: bool = False, since: str | datetime | None = None,
            agent: str | None = None, limit: int | None = None, sample: int | None = None,
            config: Config | None = None, progress: Callable[[int], None] | None = None) -> HarvestResult:
    """Stream ``store.runs(...)`` into ``cases_dir/pending/``; memory grows with distinct cases, never with runs.

    ``sample=N`` keeps every failed run and a reproducible sample of at most N of the others.
    Runs matching a reviewed case are skipped (its verdict stands); runs matching a pending case or
    an earlier run of this harvest add to that case's ``source.seen`` instead of adding a twin. A
    pending case from an earlier harvest counts only runs that started after its ``last_seen``, so
    harvesting the same store twice counts nothing twice.
    ``progress`` is called with the number of runs read so far (every 100 runs and at the end).
    """
    config = config or Config()
    folder = CaseFolder(cases_dir)
    pending_dir = folder.folder_for("pending")
    case_runs: set[tuple[str, str]] = set()
    index = _signature_index(folder, case_runs)
    taken = folder.ids()
    extra_seen: dict[Path, tuple[int, Optional[str]]] = {}  # path -> (runs to add, newest start)
    created: set[Path] = set()
    result = HarvestResult()
    reservoir: list[tuple[int, int, Run]] = []  # (-priority, order, run): a max-heap of the N smallest priorities

    def take(run: Run) -> None:
        reading = _read(run, config, incident=False, forbid=())
        sig = _signature(run, reading.kind)
        hit = index.get(sig)
        if hit is not None:
            status, path, last_seen = hit
            if status != "pending":
                result.skipped += 1
            elif path in created or not (run.started_at and last_seen) or run.started_at > last_seen:
                count, newest = extra_seen.get(path, (0, None))
                extra_seen[path] = (count + 1, max(filter(None, (newest, run.started_at)), default=None))
            else:
                result.counted += 1
            return
        if (run.trace_id, run.run_id) in case_runs:  # already a case under another signature (an incident's)
            result.counted += 1
            return
        case = _build(run, reading, config)
        case.id = folder.unique_id(case.id, taken)
        taken.add(case.id)
        path = save_case(case, pending_dir)
        index[sig] = ("pending", path, run.started_at)
        created.add(path)
        result.new += 1
        result.new_ids.append(case.id)

    runs = store.runs(failed=True if failed_only else None, agent=agent, since=since, limit=limit)
    for n, run in enumerate(runs, 1):
        result.runs = n
        if progress is not None and n % 100 == 0:
            progress(n)
        if sample is not None and not failed_only and not run.failed:
            entry = (-_sample_priority(run), n, run)
            if len(reservoir) < sample:
                heapq.heappush(reservoir, entry)
            elif reservoir and entry > reservoir[0]:
                heapq.heapreplace(reservoir, entry)
            continue
        take(run)
    for _, _, run in sorted(reservoir, reverse=True):
        take(run)
    if progress is not None:
        progress(result.runs)
    for path, (count, newest) in extra_seen.items():
        case = load_case(path)
        case.source.seen += count
        case.source.last_seen = max(filter(None, (case.source.last_seen, newest)), default=None)
        save_case(case, path.parent)
        if path not in created:
            result.updated += 1
    return result
