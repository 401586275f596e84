"""``fidelity``: what of a run its imported spans actually held, in one line a reviewer can trust.

A backend keeps what the app's instrumentation sent and what its own limits let through: content
capture may have been off (no prompt, no tool args or results), attributes may have been cut at a
length limit, token counts may never have been recorded. A case made from such a trace has fixtures
that cannot replay what was never stored, so the line says, before anyone accepts the case, which of
prompt, answer, tool args, tool results and token counts were there.
"""

from __future__ import annotations

from typing import NamedTuple

from ...model import Run

__all__ = ["Fidelity", "fidelity"]


class Fidelity(NamedTuple):
    held: list[str]
    missing: list[str]

    def line(self, backend: str) -> str:
        held = ", ".join(self.held) or "nothing"
        missing = f"; missing: {', '.join(self.missing)}" if self.missing else ""
        return f"{backend} held: {held}{missing}"


def fidelity(run: Run) -> Fidelity:
    held: list[str] = []
    missing: list[str] = []

    def say(name: str, have: int, of: int = 1, *, cut: int = 0) -> None:
        part = name if of == 1 else f"{name} ({have}/{of})"
        if cut:
            part += f", {cut} cut short"
        (held if have else missing).append(part if have or of == 1 else name)

    say("prompt", int(bool(run.prompt)))
    say("answer", int(bool(run.answer) or run.stop != "answered"))
    calls = run.calls
    if calls:
        say("tool args", sum(c.args is not None for c in calls), len(calls))
        ran = [c for c in calls if c.executed or c.status == "error"]
        if ran:
            have = sum(c.result is not None or c.error is not None for c in ran)
            say("tool results", have, len(ran), cut=sum(c.truncated for c in ran))
    say("token counts", int(run.usage.input_tokens is not None or run.usage.output_tokens is not None))
    return Fidelity(held, missing)
