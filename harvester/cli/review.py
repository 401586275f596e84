"""Commands that decide on cases: review (one by one, interactively), accept and reject (one case or many),
each a call of the review actions in ``harvester.case``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from ..case import (
    EDITABLE,
    AgentCase,
    CaseFolder,
    Decisions,
    accept_cases,
    edit_case,
    field_update,
    label_answer,
    pending_ids,
    reject_cases,
)
from ..config import Config
from ..errors import CaseFileError
from . import HarvesterCliError, echo_json, handle_errors, json_option, main, plural
from .cases import cases_options, render_case
from .judging import now

__all__ = ["EDITABLE", "accept", "reject", "review"]


# -- review, accept, reject -----------------------------------------------------------------------
@main.command("accept")
@click.argument("case_ids", metavar="[ID]...", nargs=-1)
@click.option("--pending", "every_pending", is_flag=True, help="Every pending case (narrowed by --tag and --cluster).")
@click.option("--tag", metavar="T", help="With --pending: only the cases with this tag.")
@click.option(
    "--cluster", metavar="C", help="With --pending: only the cases harvest --by-cluster proposed for cluster C."
)
@click.option("--expected", help="What the agent should answer (stored on the case).")
@click.option("--require", "required", multiple=True, metavar="S", help="Text the answer must contain (repeatable).")
@click.option(
    "--force", is_flag=True, help="Accept even though its review notes say it is broken or a redaction rule matches it."
)
@cases_options
@json_option
@handle_errors
def accept(
    case_ids: tuple[str, ...],
    every_pending: bool,
    tag: str | None,
    cluster: str | None,
    expected: str | None,
    required: tuple[str, ...],
    force: bool,
    config: Config,
    folder: CaseFolder,
    as_json: bool,
) -> None:
    """Accept cases without prompts: they move to cases/ and the nightly replay runs them.

    A case whose review notes say it is broken (a truncated result, payloads or the prompt not
    captured) is refused until you fix it and delete the note, or pass --force; so is a case a
    redaction rule still matches (the error names the fields). Given many cases, each is refused on
    its own (named, with why) and the others are accepted; the command then exits 2. --expected gives
    a case naming no judge the config's default_judge.
    """
    if (tag or cluster) and not every_pending:
        raise HarvesterCliError("--tag and --cluster choose among the pending cases: add --pending")
    if len(case_ids) == 1 and not every_pending:
        path = folder.accept(case_ids[0], expected=expected, required=required, force=force, judge=config.default_judge)
        _done(folder.load(case_ids[0]), path, as_json)
        return
    ids = [*case_ids, *(pending_ids(folder, tag=tag, cluster=cluster) if every_pending else ())]
    if not ids and not every_pending:
        raise HarvesterCliError("name the cases to accept (ID...), or accept --pending")
    decisions = accept_cases(folder, ids, expected=expected, required=required, force=force, judge=config.default_judge)
    _decided(decisions, as_json)


@main.command("reject")
@click.argument("case_ids", metavar="ID...", nargs=-1, required=True)
@click.option("--why", required=True, help="Why the cases are not worth keeping (kept in cases/rejected/).")
@cases_options
@json_option
@handle_errors
def reject(case_ids: tuple[str, ...], why: str, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Reject cases: they move to cases/rejected/ so a re-harvest will not propose them again."""
    if len(case_ids) == 1:
        path = folder.reject(case_ids[0], why)
        _done(folder.load(case_ids[0]), path, as_json)
        return
    _decided(reject_cases(folder, case_ids, why), as_json)


def _decided(decisions: Decisions, as_json: bool) -> None:
    """A bulk decision: each refusal on its own line (stderr), then one summary line; exit 2 if any was refused."""
    if as_json:
        echo_json(decisions.to_dict())
    else:
        for case_id, why in decisions.refused.items():
            click.echo(f"refused {case_id}: {why}", err=True)
    if not decisions.ok:
        raise HarvesterCliError(decisions.summary())
    if not as_json:
        click.echo(decisions.summary())
        if decisions.verdict == "accepted" and decisions.done:
            click.echo("then: harvester suite bump")


def _done(case: AgentCase, path: Path, as_json: bool) -> None:
    if as_json:
        echo_json({"id": case.id, "status": case.status, "path": str(path)})
        return
    click.echo(f"{case.status} {case.id} -> {path}")
    if case.status == "accepted":
        for note in case.review_notes:
            click.echo(f"warning: {case.id}: {note}", err=True)
        click.echo("then: harvester suite bump")


@main.command("review")
@click.argument("case_id", metavar="[ID]", required=False)
@click.option("--force", is_flag=True, help="Let [a]ccept take a case a redaction rule still matches.")
@click.option(
    "--web", is_flag=True, help="Review on a local page instead (127.0.0.1, its URL printed once); Ctrl-C stops it."
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="With --web: the port to listen on [default: a free one]."
)
@cases_options
@handle_errors
def review(case_id: str | None, force: bool, web: bool, port: int, config: Config, folder: CaseFolder) -> None:
    """Walk through pending cases: accept, edit a field, label the answer, reject or skip each one.

    Labelling the recorded answer good or bad (with a reason) is what a judge is calibrated against
    (harvester judge calibrate). Setting expected gives a case naming no judge the config's default_judge.

    A case a redaction rule still matches is not accepted (its fields are named; edit, reject or
    skip it) unless --force, and the review then exits 2.

    --web shows every pending case on one page, grouped by cluster, and makes the same decisions
    (same checks, same files). It listens on 127.0.0.1 only; its URL holds a random token, printed
    once, and a request without it gets 403.
    """
    if web:
        if case_id:
            raise HarvesterCliError("review --web shows every pending case: leave out ID")
        from ._review_web import serve_review

        counts = serve_review(folder, port=port, force=force, default_judge=config.default_judge, echo=click.echo)
        click.echo(
            f"reviewed: {counts['accepted']} accepted, {counts['rejected']} rejected, "
            f"{plural(counts['edited'], 'edit')}, {plural(counts['labelled'], 'label')}"
        )
        return
    if case_id:
        ids = [case_id]
    else:
        ids = folder.ids_with("pending")  # each case is read in full when it is shown
    if not ids:
        click.echo("no pending cases (harvest some with: harvester harvest, or harvester incident TRACE_ID)")
        return
    counts = {"accepted": 0, "rejected": 0, "skipped": 0}
    refused: set[str] = set()  # refused for secrets, then neither accepted nor rejected
    try:
        for i, cid in enumerate(ids, 1):
            verdict = _review_one(folder, cid, f"[{i}/{len(ids)}]", force, refused, config)
            if verdict == "quit":
                break
            counts[verdict] += 1
            if verdict != "skipped":
                refused.discard(cid)
    except click.Abort:  # end of input (piped answers ran out) or Ctrl-C: what was decided is saved
        click.echo("", err=True)
        raise HarvesterCliError(
            f"review stopped before the end (input ended or interrupted); saved so far: {_counts(counts)}"
        ) from None
    click.echo(f"reviewed: {_counts(counts)}")
    if refused:
        raise HarvesterCliError(
            f"not accepted, a redaction rule still matches them: {', '.join(sorted(refused))} "
            "(replace the secrets by hand, or review with --force)"
        )


def _counts(counts: dict[str, int]) -> str:
    return f"{counts['accepted']} accepted, {counts['rejected']} rejected, {counts['skipped']} skipped"


def _review_one(folder: CaseFolder, case_id: str, position: str, force: bool, refused: set[str], config: Config) -> str:
    """One case, prompting until a verdict; a case refused for secrets goes on ``refused``."""
    case = folder.load(case_id)
    while True:
        click.echo(f"\n{position} " + render_case(case, folder.find(case_id)))
        action = click.prompt(
            "[a]ccept, [e]dit a field, [l]abel the answer, [r]eject, [s]kip, [q]uit",
            type=click.Choice(["a", "e", "l", "r", "s", "q"]),
            show_choices=False,
        )
        if action == "l":
            case = _label(folder, case)
            continue
        if action == "a":
            leaks = [] if force else folder.secret_fields(case)
            if leaks:
                click.echo(f"  not accepted: a redaction rule still matches {', '.join(leaks)} (--force accepts it)")
                refused.add(case_id)
                continue
            blockers = case.blocking_notes()
            if blockers:
                for note in blockers:
                    click.echo(f"  broken: {note}")
                if not click.confirm("accept it anyway?", default=False):
                    continue
            path = folder.accept(case_id, force=True)
            click.echo(f"accepted -> {path}")
            return "accepted"
        if action == "r":
            why = click.prompt("why reject")
            path = folder.reject(case_id, why)
            click.echo(f"rejected -> {path}")
            return "rejected"
        if action == "s":
            return "skipped"
        if action == "q":
            return "quit"
        case = _edit(folder, case, config)


def _label(folder: CaseFolder, case: AgentCase) -> AgentCase:
    """The reviewer's verdict on the recorded answer (good, bad, or skip), with a reason: what a judge
    is calibrated against."""
    if not case.recorded.answer:
        click.echo("  no recorded answer to label")
        return case
    verdict = click.prompt("answer is [g]ood, [b]ad, [s]kip", type=click.Choice(["g", "b", "s"]), show_choices=False)
    if verdict == "s":
        return case
    reason = click.prompt("why", default="", show_default=False)
    case = label_answer(folder, case, "good" if verdict == "g" else "bad", reason, at=now())
    click.echo(f"  labelled {case.labels[-1].verdict} ({len(case.labels)} label(s) on this case)")
    return case


def _edit(folder: CaseFolder, case: AgentCase, config: Config) -> AgentCase:
    """Change one field through the review actions (``field_update``, then ``edit_case``: the model
    validates before anything is saved)."""
    name = click.prompt("field", type=click.Choice(EDITABLE))
    try:
        return edit_case(folder, case, field_update(case, name, _ask, default_judge=config.default_judge))
    except (ValueError, CaseFileError) as exc:
        click.echo(f"not changed: {exc}", err=True)
        return case


def _ask(question: str, default: str, choices: Sequence[str] = ()) -> str:
    """One question of a harvested check's edit, on the terminal (``checks.Ask``)."""
    return str(click.prompt(question, default=default, type=click.Choice(list(choices)) if choices else None))
