"""``harvester triage``: a window of failing runs as a short ranked list of clusters (``harvest.triage``)."""

from __future__ import annotations

import click

from ..case import CaseFolder
from ..config import Config
from . import ENCODABLE, echo_json, handle_errors, json_option, main, open_store, store_option
from .cases import cases_options

__all__ = ["triage"]

_WIDTH = 72  # characters of a cluster's signature on its line


@main.command("triage")
@click.option("--since", metavar="T", default="7d", show_default=True, help="Start of the window: an age or ISO time.")
@click.option("--until", metavar="T", help="End of the window (default: now).")
@click.option("--agent", metavar="A", type=ENCODABLE, help="Only runs of agent A.")
@click.option("--similar", is_flag=True, help="Merge clusters whose error texts are near duplicates.")
@click.option("--cluster", "cluster_id", metavar="C", help="Show cluster C in full.")
@store_option
@cases_options
@json_option
@handle_errors
def triage(
    since: str,
    until: str | None,
    agent: str | None,
    similar: bool,
    cluster_id: str | None,
    store_path: str | None,
    config: Config,
    folder: CaseFolder,
    as_json: bool,
) -> None:
    """Group the window's failing (and flagged) runs into clusters of one failure each, new and growing first.

    A cluster is the runs sharing a failure kind, stop reason, tool path, failing tool and error text
    with ids, numbers, UUIDs and quoted values masked. Each shows its runs in the window and in the
    window of the same length before it, when it was last seen, and the cases that already cover it.
    --similar also merges error texts whose words are at least 80% alike (Jaccard). Make a case of
    each uncovered cluster with: harvester harvest --by-cluster --since T.
    """
    from ..harvest import triage as run_triage

    store = open_store(store_path, config)
    found = run_triage(store, folder.root, since=since, until=until, agent=agent, merge_similar=similar, config=config)
    if cluster_id is not None:
        one = found.find(cluster_id)
        if as_json:
            echo_json(one.to_dict())
            return
        example = f"{one.example[0]} (run {one.example[1]})" if one.example else "-"
        covered = ", ".join(f"{cid} ({status})" for cid, status in sorted(one.covered.items())) or "no case yet"
        click.echo(f"{one.id}  {one.key.summary()}")
        click.echo(f"  runs:     {one.size} in the window, {one.previous} before ({one.trend})")
        click.echo(f"  seen:     {one.first_seen} .. {one.last_seen}")
        click.echo(f"  example:  {example}  (harvester traces show {one.example[0] if one.example else ''})")
        click.echo(f"  covered:  {covered}")
        if one.merged:
            click.echo(f"  merged:   {', '.join(one.merged)}")
        return
    if as_json:
        echo_json(found.to_dict())
        return
    click.echo(found.summary())
    if not found.clusters:
        return
    rows = [
        (
            c.id,
            str(c.size),
            str(c.previous),
            c.trend,
            (c.last_seen or "-")[:19],
            _cases(sorted(c.covered)),
            _abridge(c.key.summary()),
        )
        for c in found.clusters
    ]
    head = ("CLUSTER", "RUNS", "PREV", "TREND", "LAST SEEN", "CASE", "SIGNATURE")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    for row in [head, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:6], widths)) + f"  {row[6]}")
    if any(not c.covered for c in found.clusters):
        click.echo(f"a case per uncovered cluster: harvester harvest --by-cluster --since {since}")


def _cases(ids: list[str]) -> str:
    return ",".join(ids[:2]) + (f" +{len(ids) - 2}" if len(ids) > 2 else "") if ids else "-"


def _abridge(text: str) -> str:
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."
