"""Text from a case, a report or an agent, made inert for Markdown: it renders as the characters it holds.

The Markdown summary goes where people read with their guard down (the job summary, a pull-request
comment), so nothing a case, a check or an agent wrote may act there: no HTML (an unclosed ``<!--`` hides
everything after it, the exit code too), no image or link, no autolinked URL, no @mention that pings a
person or a team, no heading, quote, list or code fence, no bidi override that reorders what is shown.
``inert`` escapes one string for any inline position (a table cell, a list item, a heading's text), on
one line. A mention and a URL are broken with an invisible joiner: GitHub links them after the Markdown
is rendered, where no escape reaches.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["JOINER", "inert", "visible"]

JOINER = "\u200d"  # zero-width joiner: invisible, and no name, scheme or host character
_NEWLINES = re.compile(r"\r\n|[\r\n\t]")
_UNSEEN = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}  # controls, bidi and other format characters, separators
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_PUNCTUATION = re.compile(r"[\\`*\[\]|~$]")  # code spans, emphasis, links and images, cells, strikes, math
_UNDERSCORES = re.compile(r"_+")
_LINE_START = re.compile(r"^(\s*)(?:([#=+-])|(\d+)([.)]))")  # headings, setext underlines, list markers
_AUTOLINKS = re.compile(r"(?<=:)(?=//)|(?<=@)|(?i:(?<=\bwww))(?=\.)")


def inert(text: str) -> str:
    """``text`` as Markdown that shows exactly it: one line (a line break or tab becomes a space; the ends
    are trimmed, or ``**id **`` would not close its bold), every
    control and format character as its ``\\uXXXX`` escape, HTML's ``& < >`` as entities, Markdown's
    punctuation escaped, and ``://``, ``www.`` and ``@`` broken by an invisible joiner."""
    text = visible(_NEWLINES.sub(" ", text).strip())
    text = _PUNCTUATION.sub(lambda m: "\\" + m.group(), text)
    text = _UNDERSCORES.sub(lambda m: m.group() if _within_word(text, m) else "\\_" * len(m.group()), text)
    text = "".join(_ENTITIES.get(c, c) for c in text)
    text = _LINE_START.sub(_line_start, text)
    return _AUTOLINKS.sub(JOINER, text)


def visible(text: str) -> str:
    """``text`` with every control and format character (a bidi override, a zero-width one) but a line
    break or a tab as its ``\\uXXXX`` escape: what it shows is what it holds, in Markdown or in HTML."""
    return "".join(c if c in "\n\t" else _shown(c) for c in text)


def _shown(char: str) -> str:
    if unicodedata.category(char) not in _UNSEEN:
        return char
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


def _line_start(match: re.Match[str]) -> str:
    """A mark that would start a heading or a list at a line's start, escaped (``#`` -> ``\\#``, ``1.``
    -> ``1\\.``); a quote's ``>`` is an entity already."""
    lead, mark, digits, dot = match.groups()
    return lead + ("\\" + mark if mark else digits + "\\" + dot)


def _within_word(text: str, match: re.Match[str]) -> bool:
    """An underscore between two letters or digits (``no_fixture``) never emphasizes: left as it is."""
    before, after = text[match.start() - 1 : match.start()], text[match.end() : match.end() + 1]
    return before.isalnum() and after.isalnum()
