"""Commands over judges and the human labels they are measured against: label, judge calibrate.

``harvester label FILE`` stores reviewers' verdicts on answers in bulk (``review`` labels one at a
time); ``harvester judge calibrate NAME`` asks the judge about every labelled answer and prints how far
it agrees with the reviewers (docs/judges.md). The calibration is kept in the file ``calibration.file``
names (committed beside the config, so the nightly job knows it): a replay that gates on a judge warns
(or, with ``calibration.require``, refuses) while it is not calibrated.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click
import orjson

from .._files import read_file, write_file
from ..case import AgentCase, CaseFolder, Label, labelled
from ..checks import Agreement, Panel, Subject, save_calibration
from ..config import Config
from ..errors import CaseFileError, ConfigError, HarvesterError, InputError
from ..model import Run
from ..report import calibration_html
from . import echo_json, handle_errors, json_option, main, open_store, store_option
from .cases import cases_options

__all__ = ["calibrate", "judge", "judges_for", "label", "label_subject", "now"]

VERDICTS = ("good", "bad", "skip")


def label_subject(case: AgentCase, answer: str, trace_id: str | None = None) -> Subject:
    """What a judge reads of a labelled answer: the case's prompt and expectation, the answer as a run."""
    return Subject.of(case, Run(trace_id=trace_id or "label", prompt=case.prompt, answer=answer, stop="answered"))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def judges_for(cases: list[AgentCase], config: Config, folder: CaseFolder, *, skip: bool = False) -> Panel | None:
    """The panel of the judges the cases name (None when none does), built before anything runs: a case
    naming an undefined judge, or a judge that cannot be built, is one error. With
    ``calibration.require`` a judge not calibrated yet is one too. ``skip`` (``--no-judges``): a panel
    that judges nothing and says so in the report."""
    if skip:
        return Panel((), skipped=True)
    for case in cases:
        for i, name in enumerate(case.judges):
            if name not in config.judges:
                defined = ", ".join(config.judges) or "none"
                raise CaseFileError(
                    f"no judge {name!r} (defined: {defined})", file=str(folder.find(case.id)), field=f"judges[{i}]"
                )
    names = [n for case in cases for n in case.judges]
    if not names:
        return None
    panel = Panel.from_config(config, names)
    if config.calibration.require:
        for name in panel.judges:
            problem = panel.uncalibrated(name)
            if problem is not None:
                raise ConfigError(
                    f"judge {name} is not calibrated: {problem}",
                    file=config.source,
                    field=config.field("calibration.require"),
                )
    return panel


# -- label ------------------------------------------------------------------------------------------
@main.command("label")
@click.argument("file", type=click.Path(dir_okay=False))
@store_option
@cases_options
@handle_errors
def label(file: str, store_path: str | None, config: Config, folder: CaseFolder) -> None:
    """Label answers good or bad in bulk, from a JSON-lines FILE (docs/judges.md).

    Each line: {"case": ID, "verdict": "good"|"bad"|"skip", "reason": "...", and the answer: "answer"
    (text), or "trace_id" (a stored run's answer), or neither (the case's recorded answer)}. Every line
    is checked before anything is stored; a bad one is one error naming the line and its field.
    """
    rows = [_row(file, n, line) for n, line in enumerate(read_file(file).splitlines(), 1) if line.strip()]
    stored_runs = any(row["answer"] is None and row["trace_id"] for _, row in rows)
    store = open_store(store_path, config, readonly=True) if stored_runs else None
    changed: dict[str, AgentCase] = {}
    skipped = 0
    for n, row in rows:
        case = changed.get(row["case"]) or _case(folder, file, n, row["case"])
        if row["verdict"] == "skip":
            skipped += 1
            continue
        answer = row["answer"] if row["answer"] is not None else _answer(store, case, row["trace_id"], file, n)
        entry = Label(answer=answer, verdict=row["verdict"], reason=row["reason"], trace_id=row["trace_id"], at=now())
        changed[case.id] = labelled(case, entry)
    for case in changed.values():
        folder.save(case)
    stored = len(rows) - skipped
    click.echo(f"labelled {stored} answer{'s' * (stored != 1)} on {len(changed)} case{'s' * (len(changed) != 1)}"
               f" ({skipped} skipped)")  # fmt: skip


def _row(file: str, n: int, line: bytes) -> tuple[int, dict[str, Any]]:
    where = f"line {n}"
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc})", file=file, field=where) from None
    if not isinstance(data, dict):
        raise InputError("a line is an object {case, verdict, reason, ...}", file=file, field=where)
    unknown = set(data) - {"case", "verdict", "reason", "answer", "trace_id"}
    if unknown:
        raise InputError(f"unknown key {sorted(unknown)[0]!r}", file=file, field=where)
    if not isinstance(data.get("case"), str):
        raise InputError("a case id is needed", file=file, field=f"{where}: case")
    if data.get("verdict") not in VERDICTS:
        raise InputError(f"{data.get('verdict')!r} is not good, bad or skip", file=file, field=f"{where}: verdict")
    for key in ("reason", "answer", "trace_id"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise InputError("must be text", file=file, field=f"{where}: {key}")
    return n, {
        "case": data["case"],
        "verdict": data["verdict"],
        "reason": data.get("reason") or "",
        "answer": data.get("answer"),
        "trace_id": data.get("trace_id"),
    }


def _case(folder: CaseFolder, file: str, n: int, case_id: str) -> AgentCase:
    try:
        return folder.load(case_id)
    except (HarvesterError, ValueError) as exc:  # no such case, a file that does not load, not an id
        raise InputError(str(exc), file=file, field=f"line {n}: case") from None


def _answer(store: Any, case: AgentCase, trace_id: str | None, file: str, n: int) -> str:
    """The answer a line labels: its stored run's (``trace_id``) or the case's recorded one."""
    if trace_id is None:
        answer = case.recorded.answer
    else:
        answer = next((r.answer for r in store.get(trace_id) if r.answer), None)
    if not answer:
        what = f"stored trace {trace_id}" if trace_id else f"case {case.id}'s recording"
        raise InputError(
            f"{what} holds no answer to label", file=file, field=f"line {n}: {'trace_id' if trace_id else 'answer'}"
        )
    return answer


# -- judge calibrate ----------------------------------------------------------------------------------
@main.group("judge")
def judge() -> None:
    """Judges: the checks that need judgement, and how far they agree with your reviewers."""


@judge.command("calibrate")
@click.argument("name")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Also write the agreement as an HTML page.")
@cases_options
@json_option
@handle_errors
def calibrate(name: str, html_path: str | None, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Ask judge NAME about every labelled answer and print its agreement with the labels.

    Accuracy, Cohen's kappa, the false-pass and false-fail rates with 95% Wilson intervals, the confusion
    table and each disagreement with both reasons. NAME is calibrated when kappa clears the floor
    (calibration.min_kappa, 0.6) on enough labels (calibration.min_labels, 30). Verdicts come from the
    cache when the answer is unchanged.
    """
    panel = Panel.from_config(config, [name])
    floor = config.calibration
    agreement = Agreement(name, panel.judges[name].fingerprint, floor.min_kappa, floor.min_labels)
    for case in folder.cases():
        for entry in case.labels:
            verdict = panel.ask(name, label_subject(case, entry.answer, entry.trace_id))
            passed, why = (None, verdict) if isinstance(verdict, str) else (verdict.passed, verdict.reason)
            agreement.add(case.id, entry.answer, entry.verdict, entry.reason, passed, why)
    save_calibration(config.calibration.file, agreement)
    (tally,) = panel.tallies()
    if html_path:
        write_file(html_path, calibration_html(agreement).encode(), atomic=True)
    if as_json:
        echo_json({**agreement.to_dict(), "calls": tally.calls, "cache_hits": tally.cache_hits, "cost": tally.cost})
        return
    for line in agreement.lines():
        click.echo(line)
    if not agreement.n:
        click.echo("no labelled answers yet: label some in harvester review ([l]abel) or with harvester label FILE")
    tokens = tally.input_tokens + tally.output_tokens
    cost = f"{tally.cost:.6f}" if tally.cost is not None else "n/a"
    click.echo(f"judge calls {tally.calls}, cache hits {tally.cache_hits}, {tokens:,} tokens, cost {cost}")
