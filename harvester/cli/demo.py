"""``harvester demo``: the whole loop on the built-in example agent."""

from __future__ import annotations

import click

from . import handle_errors, main

__all__ = ["demo"]


@main.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for the demo's traces, cases and reports (default: a fresh temporary folder).",
)
@handle_errors
def demo(workdir: str | None) -> None:
    """Run the whole loop offline on the example support agent.

    Serves a few requests with capture on, harvests and reviews cases, replays them as a baseline,
    catches a realistic regression (a widened tool allowlist) and injects tool failures. It shows a
    failing gate but exits 0 itself.
    """
    from ..demo.scenario import run_demo

    run_demo(workdir, echo=click.echo)
