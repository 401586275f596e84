"""The text and JSON engine: finds what the rules match in a string or a JSON-like value and puts
a deterministic pseudonym ``<kind:8hex>`` in its place.

It knows strings, numbers, dicts and lists, and no harvester type: the traversal of runs and spans
(``_traversal``) builds on it. A pseudonym is sha256 of the value, HMAC-keyed when a key is set, so
the same email or order id redacts to the same placeholder everywhere: a redacted fixture still
replays, and the args hash of a redacted call is stable across runs. Unkeyed pseudonyms of
low-entropy values (emails, card numbers) can be reversed by guessing; set ``key`` (or
``HARVESTER_REDACT_KEY``) where that matters.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ..canonical import canonical_bytes
from ._fast_path import CleanValues, nothing_in
from ._rules import (
    BIG_INT,
    CAMEL,
    CARD,
    CARD_MIN,
    CASED,
    CREDENTIAL,
    ESCAPES,
    FOLDED,
    LOCAL_PART,
    PLACEHOLDER,
    SECRET_KEY,
    Rule,
    base64_like,
    card_shaped,
    card_span,
    hides_text,
    kind_name,
    luhn_ok,
    maybe_secret,
    names_data,
    random_like,
)

__all__ = ["Engine", "Pass", "MIN_LEN"]

_KEY_ENV = "HARVESTER_REDACT_KEY"
MIN_LEN = 6  # shorter strings cannot hold any built-in secret ("a@b.co")
_SHORT = 200  # strings up to this long recur (names, models, resource values): their results are remembered
# Pseudonyms of values up to this many bytes are cached. The cache is bounded by count, so a
# long-running process that redacts large values (a whole secret header, a field rule's object)
# would otherwise hold up to 50,000 of them; hashing a large value again costs little beside it.
_DIGEST_CACHE_MAX = 512
_NO_CACHE: dict[str, str] = {}  # never written
_KIND = re.compile("[a-z0-9_]*")


def _digest(key: bytes | None, raw: bytes) -> str:
    # hashlib loads OpenSSL (milliseconds): imported at the first pseudonym, not with the hook.
    import hashlib

    if key:
        import hmac

        return hmac.new(key, raw, hashlib.sha256).hexdigest()[:8]
    return hashlib.sha256(raw).hexdigest()[:8]


def _in_word(s: str, i: int) -> bool:
    """Whether ``s[i]`` continues an ASCII word. Only ASCII: Chinese, Japanese and Russian write no
    space before a Latin token ("我的密钥是sk-..."), so a letter of theirs never joins one."""
    c = s[i - 1]
    return c.isascii() and c.isalnum() and s[i - 2 : i] not in ESCAPES


def _in_kind(s: str, i: int) -> bool:
    """Whether ``s[i]`` is inside the kind of a placeholder (``<aws_secret:...>``, ``<npm_token:...>``)."""
    j = s.rfind("<", max(0, i - 32), i)
    return j >= 0 and _KIND.fullmatch(s, j + 1, i) is not None


class Pass:
    """State of one redaction pass: strings already seen and field values to chase into raw spans."""

    __slots__ = ("memo", "literals", "resource")

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}
        self.literals: dict[str, str] = {}
        self.resource: tuple[dict[str, Any], Any] | None = None


class Engine:
    """Compiled rules over text and JSON-like values. Build once; safe to call from several threads.

    ``patterns``: extra regexes, a list (kind ``custom``) or a mapping kind -> regex; when a
    pattern has a group, only its first group is replaced. ``builtin=False`` keeps only yours.
    """

    def __init__(
        self,
        patterns: Iterable[str] | Mapping[str, str] | None = None,
        *,
        key: str | bytes | None = None,
        builtin: bool = True,
    ) -> None:
        if key is None:
            key = os.environ.get(_KEY_ENV) or None
        self._key = key.encode() if isinstance(key, str) else key
        self.builtin = builtin
        items = patterns.items() if isinstance(patterns, Mapping) else (("custom", p) for p in patterns or ())
        self._custom = [(kind_name(kind), re.compile(p)) for kind, p in items]
        self._cased = [Rule(*rule, folded=False) for rule in CASED]
        self._folded = [Rule(*rule, folded=True) for rule in FOLDED]
        self._digests: dict[bytes, str] = {}
        self._secret_keys: dict[str, bool] = {}
        self._short: dict[str, str] = {}  # short strings recur (names, models, resource values): remember them
        self._clean = CleanValues()  # long values the fast path found clean (``_nothing_in``)

    # -- pseudonyms ----------------------------------------------------------------------------
    def pseudonym(self, kind: str, value: Any) -> str:
        if isinstance(value, str):
            raw = value.encode("utf-8", "surrogatepass")
        elif type(value) is int:  # as canonical JSON writes it, and past 64 bits too (which orjson refuses)
            raw = str(value).encode()
        else:
            raw = canonical_bytes(value)
        digest = self._digests.get(raw)
        if digest is None:
            digest = _digest(self._key, raw)
            if len(raw) <= _DIGEST_CACHE_MAX:
                if len(self._digests) > 50_000:
                    self._digests.clear()
                self._digests[raw] = digest
        return f"<{kind}:{digest}>"

    # -- text ----------------------------------------------------------------------------------
    def redact_text(self, text: str) -> str:
        return self._text(text, Pass())

    def _text(self, s: str, p: Pass) -> str:
        if len(s) < MIN_LEN and not self._custom and not p.literals:
            return s
        # Caches hold "" for "unchanged", so the caller gets its own object back (and copies nothing).
        done = p.memo.get(s)
        if done is not None:
            return done or s
        short = len(s) <= _SHORT and not p.literals
        if short:
            done = self._short.get(s)
            if done is not None:
                return done or s
        head = s[:1]
        out = self._json(s, p) if head in "{[" or (head.isspace() and s.lstrip()[:1] in "{[") else None
        if out is None:
            out = self._plain(s, p)
        mark = "" if out is s else out
        p.memo[s] = mark
        if short:
            if len(self._short) >= 20_000:
                self._short.clear()
            self._short[s] = mark
        return out

    def _plain(self, s: str, p: Pass, *, builtin: bool = True) -> str:
        spans = self._find(s) if builtin and self.builtin else []
        for kind, rx in self._custom:
            for m in rx.finditer(s):
                a, b = m.span(1) if rx.groups else m.span()
                if b > a:
                    spans.append((a, b, kind))
        out = self._apply(s, spans) if spans else s
        if p.literals:
            for lit, ph in p.literals.items():
                if lit in out:
                    out = out.replace(lit, ph)
        return out

    def _json(self, s: str, p: Pass) -> str | None:
        """A JSON object or array redacted as data; None when ``s`` is not one (redact it as text).

        As data, a value is found by its key (``"cookie": "..."``) as well as by its text, and a card
        number stored as a JSON number becomes a string, so the payload stays valid JSON and the run
        read from these spans keeps its tool args as an object. The user's patterns and chased field
        values then also run over the result as text: they may have been written against raw JSON.
        """
        if (
            not self._custom
            and not p.literals
            and (not self.builtin or (not maybe_secret(s.lower()) and not card_shaped(s) and not hides_text(s)))
        ):
            return s  # nothing any rule could replace, whether or not it is JSON (whose escapes hide text)
        exact = BIG_INT.search(s) is not None  # orjson reads integers past 64 bits as floats
        try:
            parsed = json.loads(s) if exact else orjson.loads(s)
        except ValueError:
            # Parse what the conventions readers parse (they replace lone surrogates first), or a
            # secret that only the data pass finds would reach the run read from this payload.
            try:
                parsed = orjson.loads(s.encode("utf-8", "replace"))
            except orjson.JSONDecodeError:
                return None
        except RecursionError:
            return self.pseudonym("payload", s)
        if not isinstance(parsed, (dict, list)):
            return None
        try:
            new = self._value(parsed, p)
            if new is parsed:
                out = s
            else:
                out = (
                    json.dumps(new, ensure_ascii=False, separators=(",", ":")) if exact else orjson.dumps(new).decode()
                )
        except (RecursionError, TypeError, ValueError):
            # Nested too deep to walk or to write back: its secrets cannot be told apart, so all of it goes.
            return self.pseudonym("payload", s)
        return self._plain(out, p, builtin=False) if self._custom or p.literals else out

    def _find(self, s: str) -> list[tuple[int, int, str]]:
        found: list[tuple[int, int, str]] = []
        low = s.lower()
        if card_shaped(s):
            for m in CARD.finditer(s):
                span = card_span(m.group())
                if span is not None:
                    found.append((m.start() + span[0], m.start() + span[1], "card"))
        if not maybe_secret(low):
            return found
        for rule in self._cased:
            if rule.trigger not in low:
                continue
            for m in rule.regex.finditer(s):
                a, b = rule.span(m)
                if rule.kind == "email":
                    a = m.start()
                    while a > 0 and s[a - 1] in LOCAL_PART and m.start() - a < 64:
                        a -= 1
                    if a == m.start():
                        continue
                elif a > 0 and _in_word(s, a) and not random_like(s[a:b]):
                    continue  # "task-..." is not "sk-..."; "密钥sk-..." and "keysk-Ab3..." are
                if rule.kind == "token" and not base64_like(s[a:b]):
                    continue  # "basic troubleshooting steps" holds no credential
                found.append((a, b, rule.kind))
        same = len(low) == len(s)  # lowercasing a few non-ASCII letters changes offsets
        for rule in self._folded:
            if rule.trigger not in low:
                continue
            text = low if same else s
            for m in (rule.regex if same else rule.regex_i).finditer(text):
                if m.start() > 0 and (_in_word(text, m.start()) or _in_kind(text, m.start())):
                    continue  # inside a word ("我的api_key=" is not), or the kind of a placeholder we wrote
                a, b = rule.span(m)
                if rule.kind == "credential" and CREDENTIAL.search(text, a, b) is None:
                    continue  # "Cookie: Chocolate Chip", "authorization: required"
                found.append((a, b, "secret" if rule.kind == "credential" else rule.kind))
        return found

    def _apply(self, s: str, spans: list[tuple[int, int, str]]) -> str:
        spans.sort()
        out, pos = [], 0
        for a, b, kind in spans:
            if a < pos:
                continue  # overlaps a replacement already made
            value = s[a:b]
            if PLACEHOLDER.fullmatch(value):
                continue
            out.append(s[pos:a])
            out.append(self.pseudonym(kind, value))
            pos = b
        if not out:
            return s
        out.append(s[pos:])
        return "".join(out)

    # -- structured values ---------------------------------------------------------------------
    def redact_value(self, value: Any) -> Any:
        """A copy of ``value`` with every string redacted; unchanged parts are shared, not copied."""
        return self._value(value, Pass())

    def _is_secret_key(self, key: str) -> bool:
        hit = self._secret_keys.get(key)
        if hit is None:
            hit = self.builtin and SECRET_KEY.search(CAMEL.sub("_", key)) is not None
            if len(self._secret_keys) < 10_000:
                self._secret_keys[key] = hit
        return hit

    def _value(self, v: Any, p: Pass) -> Any:
        if isinstance(v, str):
            return self._text(v, p)
        if isinstance(v, dict):
            out = None
            renamed = None
            secret_keys = self._secret_keys
            # Without field literals a short string's result is the same in every pass: answered from
            # the cross-pass cache here, without a call (most attribute values are short and recur).
            short = self._short if not p.literals else _NO_CACHE
            plain_ints = not self._custom and not p.literals  # only a card number can change an int
            y: Any
            for k, x in v.items():
                if isinstance(x, str):  # most values: handled here, one call fewer per value
                    hit = secret_keys.get(k)
                    if hit is None:
                        hit = isinstance(k, str) and self._is_secret_key(k)
                    if hit and x:
                        y = x if PLACEHOLDER.fullmatch(x) else self.pseudonym("secret", x)
                    else:
                        y = short.get(x)
                        y = self._text(x, p) if y is None else (y or x)
                elif type(x) is int and plain_ints and -CARD_MIN < x < CARD_MIN and secret_keys.get(k) is False:
                    y = x  # token counts, ids, sizes: most numbers, answered without a call
                elif type(x) is int or (type(x) is list and x and all(type(i) is str for i in x)):
                    # {"password": 83724519}, {"Cookie": ["sessionid=..."]}: hidden whole under a secret's
                    # name. A dict is walked instead (a JSON schema's "password" property is no secret),
                    # and floats are left alone ("input_cost_per_token": 3e-06).
                    y = (
                        self.pseudonym("secret", x)
                        if isinstance(k, str) and self._is_secret_key(k)
                        else self._value(x, p)
                    )
                else:
                    y = self._value(x, p)
                if y is not x:
                    if out is None:
                        out = dict(v)
                    out[k] = y
                if type(k) is str and names_data(k):  # a key is text too: {"sk-...": ...}, {"bob@x.io": ...}
                    nk = short.get(k)
                    nk = self._text(k, p) if nk is None else (nk or k)
                    if nk is not k:
                        if renamed is None:
                            renamed = {}
                        renamed[k] = nk
            if renamed is not None:
                out = {renamed.get(k, k): x for k, x in (out or v).items()}
            return v if out is None else out
        if isinstance(v, (list, tuple)):
            items = None
            for i, x in enumerate(v):
                y = self._value(x, p)
                if y is not x:
                    if items is None:
                        items = list(v)
                    items[i] = y
            return v if items is None else items
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if type(v) is int and -CARD_MIN < v < CARD_MIN and not self._custom and not p.literals:
                return v
            return self._number(v, p)
        if isinstance(v, (bytes, bytearray)):
            text = bytes(v).decode("utf-8", "replace")
            out_text = self._text(text, p)
            return v if out_text is text else out_text
        return v

    def _number(self, v: int | float, p: Pass) -> Any:
        """A JSON number: a card number, or a match of your patterns or a field value, becomes a string."""
        if isinstance(v, float):
            if not v.is_integer() or abs(v) >= 1e19:
                return v
            text = str(int(v))
        else:
            text = str(v)
        if self.builtin and 13 <= len(text.lstrip("-")) <= 19 and luhn_ok(text.lstrip("-")):
            return self.pseudonym("card", text)
        if p.literals and text in p.literals:
            return p.literals[text]
        for kind, rx in self._custom:  # the whole number, or 21001 would hide a field value 1001 inside it
            if rx.fullmatch(text):
                return self.pseudonym(kind, text)
        return v

    # -- the fast path (``_fast_path``) --------------------------------------------------------
    def _nothing_in(self, values: Any, p: Pass) -> bool:
        """True when no rule could change anything in ``values`` (keys included)."""
        if self._custom or p.literals or not self.builtin:
            return False
        if type(values) is list:
            values = self._clean.unknown(values)
        try:
            raw = orjson.dumps(values)
        except (TypeError, ValueError):  # bytes, lone surrogates, foreign types: the walk handles them
            return False
        if nothing_in(raw):
            if type(values) is list:
                self._clean.remember(values)
            return True
        return False
