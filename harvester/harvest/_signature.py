"""Which runs are "the same situation" (one signature, one case) and the case id a prompt gives."""

from __future__ import annotations

import re
import unicodedata

from ..canonical import digest
from ..config import Config
from ..model import Run
from ._kinds import failure_kind

__all__ = ["SLUG_MAX", "normalize_prompt", "signature", "signature_of", "slug"]

SLUG_MAX = 48
SLUG_WORDS = 6
_STOPWORDS = frozenset(
    "a an the to of for and or in on at by is are was were be been am can could would should will shall may "
    "might must i me my mine we us our you your it its this that these those with from do does did how what "
    "when where which who whom why hi hello hey please pls just still also there here so if then than as "
    "about into up out any some have has had get got let lets im ive dont".split()
)
_DIGITS = re.compile(r"\d+")
_NON_WORD = re.compile(r"[\W_]+")


def normalize_prompt(text: str | None) -> str:
    """Casefolded, digits collapsed to 0, punctuation dropped, whitespace single: order A1001 ~ order a1002."""
    folded = _DIGITS.sub("0", (text or "").casefold())
    return " ".join(_NON_WORD.sub(" ", folded).split())


def signature_of(run: Run, kind: str | None) -> str:
    """``signature`` of a run whose failure kind is known already.

    A later turn's situation includes what the user said before it: "And can you refund it?" after
    two different questions is two cases. A first turn's signature is what it always was.
    """
    parts: list[object] = [normalize_prompt(run.prompt), run.trajectory(), kind]
    if run.history:
        parts.append([normalize_prompt(m.content) for m in run.history if m.role == "user"])
    return digest(parts)


def signature(run: Run, *, config: Config | None = None) -> str:
    """16 hex identifying "the same situation": normalized prompt (and earlier user messages) +
    trajectory + failure kind.

    Runs with one signature are one case (``source.seen`` counts them), so a failure that happens a
    thousand times a night is reviewed once.
    """
    return signature_of(run, failure_kind(run, config=config))


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
