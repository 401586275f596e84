"""Redaction: secrets and personal data never reach the trace store.

Applied before anything is written, on by default. A matched value becomes a deterministic
pseudonym ``<kind:8hex>`` (sha256 of the value, HMAC-keyed when a key is set), so the same email
or order id redacts to the same placeholder everywhere: a redacted fixture still replays, and the
args hash of a redacted call is stable across runs.

Speed matters because this runs on the capture worker for every span of every run. Each family
of rules is one regex whose alternatives start with a literal or a small character set (so the
regex engine skips ahead instead of trying every position), case-insensitive rules run on the
lowercased text, and card numbers are only searched for when a cheap byte translation shows a
card-shaped run of digits. A string with no candidate costs a few passes of C code.

Unkeyed pseudonyms of low-entropy values (emails, card numbers) can be reversed by guessing; set
``key`` (or ``HARVESTER_REDACT_KEY``) where that matters. The key must be the same everywhere the
placeholders should agree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import re
from typing import Any, Iterable, Mapping, Sequence

import orjson

from .canonical import canonical_bytes, split_path
from .errors import ConfigError
from .model import Run
from .spans import SpanData

PLACEHOLDER = re.compile(r"<[a-z0-9_]+:[0-9a-f]{8}>")
_KEY_ENV = "HARVESTER_REDACT_KEY"
_MIN_LEN = 6  # shorter strings cannot hold any built-in secret ("a@b.co")
_LITERAL_MIN_LEN = 4
_SHORT = 200  # field values shorter than this are not searched for in raw spans
# Pseudonyms of values up to this many bytes are cached. The cache is bounded by count, so a
# long-running process that redacts large values (a whole secret header, a field rule's object)
# would otherwise hold up to 50,000 of them; hashing a large value again costs little beside it.
_DIGEST_CACHE_MAX = 512

# Each rule: (kind, trigger, pattern). The trigger is a lower-case literal that any match
# contains, checked with ``in`` on the lowercased text first (a C substring search); the pattern starts with a literal so that the regex
# engine jumps between candidates. One alternation of everything would try every position and be
# twenty times slower. A group named ``v``/``w``/``x`` is the part replaced (the rest stays for
# readability); without one the whole match is replaced.
_CASED: list[tuple[str, str, str]] = [
    ("api_key", "sk-", r"sk-[A-Za-z0-9_-]{16,}"),  # OpenAI sk-..., sk-proj-..., Anthropic sk-ant-...
    ("api_key", "_", r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"),
    ("api_key", "akia", r"AKIA[A-Z0-9]{16}(?![A-Z0-9])"),
    ("api_key", "asia", r"ASIA[A-Z0-9]{16}(?![A-Z0-9])"),
    ("api_key", "xox", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("api_key", "aiza", r"AIza[0-9A-Za-z_-]{35}"),  # Google / Gemini
    ("api_key", "_live_", r"(?:sk|rk)_live_[0-9A-Za-z]{16,}"),  # Stripe
    ("api_key", "_test_", r"(?:sk|rk)_test_[0-9A-Za-z]{16,}"),
    ("api_key", "hf_", r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    ("token", "eyj", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # a bare JWT
    ("secret", "sig=", r"[?&]sig=(?P<v>[A-Za-z0-9%+/=]{16,})"),  # Azure SAS signature
    ("token", "basic", r"(?i:basic)\s+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
    ("password", "@", r"://[^/\s:@\"'<>]{1,256}:(?P<v>[^/\s@\"'<>]{1,256})@"),
    ("email", "@", r"@(?P<v>[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*"
                   r"\.[A-Za-z]{2,24})(?![A-Za-z0-9-])"),
]
# Case-insensitive rules, written in lower case and run on the lowercased text.
_VALUE = (r"[\"']?\s{0,3}[:=]\s{0,3}(?:\"(?P<v>(?:[^\"\\\n]|\\.){1,512})\"|'(?P<w>[^'\n]{1,512})'"
          r"|(?P<x>[^\s\"'&,;}\])<]{4,512}))")
_FOLDED: list[tuple[str, str, str]] = [
    ("token", "bearer", r"bearer\s+(?P<v>[a-z0-9._~+/-]{8,}=*)"),
    ("secret", "key", r"(?:api|private|secret|access)[_-]?key" + _VALUE),
    *(("secret", word[:5], word + _VALUE) for word in ("token", "secret", r"passw(?:or)?d", "pwd", r"credentials?")),
    # A cookie header's value is every pair up to the end of the line; an authorization value is its
    # scheme word and credential ("Token 9944b0..."). "Authorization: Bearer/Basic ..." is left to
    # those rules, which keep the scheme readable. Both must hold a digit or "=" (see _CREDENTIAL).
    ("credential", "cooki", r"(?:set-)?cookie" + _VALUE.replace(r"[^\s\"'&,;}\])<]{4,512}", r"[^\n\"'<]{4,1024}")),
    ("credential", "autho", r"authorization" + _VALUE.replace(r"\s{0,3}(?:", r"\s{0,3}(?![\"']?(?:bearer|basic)\s)(?:", 1)
                                                    .replace(r"(?P<x>", r"(?P<x>(?:[a-z]{2,12}\s)?", 1)),
]
_CREDENTIAL = re.compile(r"[0-9=]")
# Dict keys and span attribute names whose (string) value is a secret as a whole.
# Matched against the key with camelCase split ("awsSecretAccessKey" -> "aws_Secret_Access_Key").
_SECRET_KEY = re.compile(
    r"(?:^|[^a-z0-9])(?:api[_ -]?key|access[_ -]?key|access[_ -]?token|auth[_ -]?token|refresh[_ -]?token"
    r"|id[_ -]?token|token|secret|client[_ -]?secret|secret[_ -]?key|private[_ -]?key|password|passwd|pwd"
    r"|authorization|cookie|credentials?)$", re.I)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Any trigger at all: most strings have none and stop here. Every rule's match and every _SECRET_KEY
# name, lowercased, contains one of these, so a JSON payload without any (and without a card-shaped
# run of digits) has nothing to replace and is not parsed. Each is its own search, starting at a
# literal (the regex engine then jumps between candidates in C, ~0.3 ns a character), and the
# rarest are skipped when one of their characters is absent (a memchr): one alternation of all of
# them tries every position and costs ten times as much, and every string of every run pays this.
_TRIGGERS = tuple((gate, re.compile(pattern).search) for gate, pattern in (
    ("@", "@"),                           # emails, passwords in URLs
    ("k", r"k(?:ey|en|ie|ia|-|_t|_l)"),   # key, token, cookie, AKIA, sk-, sk_test_/sk_live_
    ("b", r"b(?:earer|asi|_p)"),          # bearer, basic (also "BASİC"), github_pat_
    ("w", r"w(?:or)?d"),                  # password, passwd, pwd
    ("_", r"_(?<=h[pousr]_|hf_)"),        # ghp_ and its kin, hf_
    ("c", r"c(?:re|ook)"),                # secret, credential, cookie (also "COOKİE": İ lowercases to i + a dot)
    ("z", "za"),                          # authorization, AIza
    ("j", "yj"),                          # eyJ (a JWT)
    ("=", "g="),                          # sig= (Azure SAS)
    ("x", "xox"),                         # Slack
    ("i", "asia"),                        # AWS temporary keys
))


# Letters that case-insensitive rules (and the secret-key test) match as ASCII but that lowercasing
# leaves apart: dotless ı and long ſ; İ lowercases to i plus a combining dot, which goes.
_FOLD = {0x131: "i", 0x17F: "s", 0x307: None}


def _maybe_secret(low: str) -> bool:
    """Whether lowercased text holds any rule's trigger (a cheap superset of "some rule matches")."""
    if not low.isascii():
        low = low.translate(_FOLD)
    for gate, search in _TRIGGERS:
        if gate in low and search(low) is not None:
            return True
    return False


# Escapes in JSON or a repr ("...\\napi_key=...") end a word as well as a space does.
_ESCAPES = ("\\n", "\\t", "\\r")
_CARD_MIN = 10**12  # a card number has 13 digits or more
_BIG_INT = re.compile(r"[0-9]{20}")
_CARD = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
# Bytes -> digits '0', separators '1', everything else '2': a card leaves '0'*13 or '00001000'.
_CARD_SHAPE = bytes.maketrans(bytes(range(256)), b"".join(
    b"0" if chr(i).isdigit() and i < 128 else b"1" if i in (32, 45) else b"2" for i in range(256)))
_ESCAPED = re.compile(rb"\\u")  # a \u escape in serialized JSON text
_CARD_RUN = re.compile(b"0000(?:000000000|1000)")  # in a _CARD_SHAPE translation: 13 digits, or 4+3 across a separator
_NO_CACHE: dict[str, str] = {}  # never written
_LOCAL_PART = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")


def _card_shaped(s: str) -> bool:
    """A cheap test (one C translation) for a run of digits long enough to be a card number."""
    return len(s) >= 13 and _card_shaped_bytes(s.encode("utf-8", "surrogatepass"))


def _card_shaped_bytes(raw: bytes) -> bool:
    return _CARD_RUN.search(raw.translate(_CARD_SHAPE)) is not None


def _names_data(key: str) -> bool:
    """A key that may itself be personal data ({"bob@example.com": ...}), redacted as text; a key that
    merely contains some (an OData "members@odata.bind") stays."""
    return ("@" in key or len(key) >= 13) and "@odata." not in key


def _base64_like(value: str) -> bool:
    """An HTTP Basic credential is base64, not a word ("basic troubleshooting", "BASIC SETTINGS")."""
    return not (value.isalpha() and (value.islower() or value.isupper() or value[1:].islower()))


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class _Rule:
    __slots__ = ("kind", "trigger", "regex", "regex_i", "groups")

    def __init__(self, kind: str, trigger: str, pattern: str, folded: bool) -> None:
        self.kind = kind
        self.trigger = trigger
        self.regex = re.compile(pattern)
        self.regex_i = re.compile(pattern, re.I) if folded else self.regex
        self.groups = list(self.regex.groupindex)

    def span(self, m: re.Match[str]) -> tuple[int, int]:
        for g in self.groups:
            if m.group(g) is not None:
                return m.span(g)
        return m.span()


def _kind_name(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "redacted"


class _Pass:
    """State of one redaction pass: strings already seen and field values to chase into raw spans."""

    __slots__ = ("memo", "literals", "resource")

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}
        self.literals: dict[str, str] = {}
        self.resource: tuple[dict[str, Any], Any] | None = None


class Redactor:
    """Compiled redaction rules. Build once; every method is safe to call from several threads.

    ``patterns``: extra regexes, a list (kind ``custom``) or a mapping kind -> regex; when a
    pattern has a group, only its first group is replaced. ``fields``: per-tool paths whose whole
    value is replaced, ``{"get_customer": ["result.ssn", "args.card"]}`` (``*`` matches any key).
    ``builtin=False`` keeps only your rules.
    """

    def __init__(self, patterns: Iterable[str] | Mapping[str, str] | None = None,
                 fields: Mapping[str, Iterable[str]] | None = None, *, key: str | bytes | None = None,
                 builtin: bool = True) -> None:
        if key is None:
            key = os.environ.get(_KEY_ENV) or None
        self._key = key.encode() if isinstance(key, str) else key
        self.builtin = builtin
        items = patterns.items() if isinstance(patterns, Mapping) else (("custom", p) for p in patterns or ())
        self._custom = [(_kind_name(kind), re.compile(p)) for kind, p in items]
        self._fields: dict[str, list[tuple[str, list[str]]]] = {}
        for tool, paths in (fields or {}).items():
            for path in paths:
                parts = split_path(path)
                if len(parts) < 2 or parts[0] not in ("args", "result"):
                    raise ValueError(f"redaction field path {path!r} of tool {tool!r} must start with args. or result.")
                kind = _kind_name(next((p for p in reversed(parts) if p != "*"), "field"))
                self._fields.setdefault(tool, []).append((kind, parts))
        self._cased = [_Rule(*rule, folded=False) for rule in _CASED]
        self._folded = [_Rule(*rule, folded=True) for rule in _FOLDED]
        self._digests: dict[bytes, str] = {}
        self._secret_keys: dict[str, bool] = {}
        self._clean_keys: set[Any] = set()
        self._short: dict[str, str] = {}  # short strings recur (names, models, resource values): remember them

    @classmethod
    def from_option(cls, option: "bool | Redactor | Mapping[str, Any] | None") -> "Redactor | None":
        """``True``: the built-in rules; ``False``/``None``: no redaction; a mapping: ``Redactor(**mapping)``."""
        if isinstance(option, Redactor):
            return option
        if option is True:
            return cls()
        if not option:
            return None
        if isinstance(option, Mapping):
            return cls(**option)
        raise TypeError(f"redact must be True, False, a Redactor or a mapping of rules, not {type(option).__name__}")

    def is_builtin_only(self) -> bool:
        """The built-in rules and nothing else (no patterns, field rules or key): a reader in another
        process can redact exactly as this one does with ``Redactor(key="")``."""
        return type(self) is Redactor and self.builtin and not self._custom and not self._fields and not self._key

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
            if self._key:
                digest = hmac.new(self._key, raw, hashlib.sha256).hexdigest()[:8]
            else:
                digest = hashlib.sha256(raw).hexdigest()[:8]
            if len(raw) <= _DIGEST_CACHE_MAX:
                if len(self._digests) > 50_000:
                    self._digests.clear()
                self._digests[raw] = digest
        return f"<{kind}:{digest}>"

    # -- text ----------------------------------------------------------------------------------
    def redact_text(self, text: str) -> str:
        return self._text(text, _Pass())

    def _text(self, s: str, p: _Pass) -> str:
        if len(s) < _MIN_LEN and not self._custom and not p.literals:
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

    def _plain(self, s: str, p: _Pass, *, builtin: bool = True) -> str:
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

    def _json(self, s: str, p: _Pass) -> str | None:
        """A JSON object or array redacted as data; None when ``s`` is not one (redact it as text).

        As data, a value is found by its key (``"cookie": "..."``) as well as by its text, and a card
        number stored as a JSON number becomes a string, so the payload stays valid JSON and the run
        read from these spans keeps its tool args as an object. The user's patterns and chased field
        values then also run over the result as text: they may have been written against raw JSON.
        """
        if not self._custom and not p.literals and (not self.builtin or (
                not _maybe_secret(s.lower()) and not _card_shaped(s) and "\\u" not in s)):
            return s  # nothing any rule could replace, whether or not it is JSON (whose \u escapes hide text)
        exact = _BIG_INT.search(s) is not None  # orjson reads integers past 64 bits as floats
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
                out = json.dumps(new, ensure_ascii=False, separators=(",", ":")) if exact else orjson.dumps(new).decode()
        except (RecursionError, TypeError, ValueError):
            # Nested too deep to walk or to write back: its secrets cannot be told apart, so all of it goes.
            return self.pseudonym("payload", s)
        return self._plain(out, p, builtin=False) if self._custom or p.literals else out

    def _find(self, s: str) -> list[tuple[int, int, str]]:
        found: list[tuple[int, int, str]] = []
        low = s.lower()
        if _card_shaped(s):
            for m in _CARD.finditer(s):
                if luhn_ok(m.group().replace(" ", "").replace("-", "")):
                    found.append((m.start(), m.end(), "card"))
        if not _maybe_secret(low):
            return found
        for rule in self._cased:
            if rule.trigger not in low:
                continue
            for m in rule.regex.finditer(s):
                a, b = rule.span(m)
                if rule.kind == "email":
                    a = m.start()
                    while a > 0 and s[a - 1] in _LOCAL_PART and m.start() - a < 64:
                        a -= 1
                    if a == m.start():
                        continue
                elif a > 0 and s[a - 1].isalnum() and s[a - 2:a] not in _ESCAPES:
                    continue  # "task-..." is not "sk-..."
                if rule.kind == "token" and not _base64_like(s[a:b]):
                    continue  # "basic troubleshooting steps" holds no credential
                found.append((a, b, rule.kind))
        same = len(low) == len(s)  # lowercasing a few non-ASCII letters changes offsets
        for rule in self._folded:
            if rule.trigger not in low:
                continue
            text = low if same else s
            for m in (rule.regex if same else rule.regex_i).finditer(text):
                before = text[m.start() - 1] if m.start() > 0 else " "
                if (before.isalnum() and text[m.start() - 2:m.start()] not in _ESCAPES) or before == "<":
                    continue  # inside a word, or the kind of a placeholder we wrote
                a, b = rule.span(m)
                if rule.kind == "credential" and _CREDENTIAL.search(text, a, b) is None:
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
        return self._value(value, _Pass())

    def _is_secret_key(self, key: str) -> bool:
        hit = self._secret_keys.get(key)
        if hit is None:
            hit = self.builtin and _SECRET_KEY.search(_CAMEL.sub("_", key)) is not None
            if len(self._secret_keys) < 10_000:
                self._secret_keys[key] = hit
        return hit

    def _value(self, v: Any, p: _Pass) -> Any:
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
                elif type(x) is int and plain_ints and -_CARD_MIN < x < _CARD_MIN and secret_keys.get(k) is False:
                    y = x  # token counts, ids, sizes: most numbers, answered without a call
                elif type(x) is int or (type(x) is list and x and all(type(i) is str for i in x)):
                    # {"password": 83724519}, {"Cookie": ["sessionid=..."]}: hidden whole under a secret's
                    # name. A dict is walked instead (a JSON schema's "password" property is no secret),
                    # and floats are left alone ("input_cost_per_token": 3e-06).
                    y = self.pseudonym("secret", x) if isinstance(k, str) and self._is_secret_key(k) else self._value(x, p)
                else:
                    y = self._value(x, p)
                if y is not x:
                    if out is None:
                        out = dict(v)
                    out[k] = y
                if type(k) is str and _names_data(k):
                    nk = short.get(k)
                    nk = self._text(k, p) if nk is None else (nk or k)
                    if nk is not k and PLACEHOLDER.fullmatch(nk):
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
            if type(v) is int and -_CARD_MIN < v < _CARD_MIN and not self._custom and not p.literals:
                return v
            return self._number(v, p)
        if isinstance(v, (bytes, bytearray)):
            text = bytes(v).decode("utf-8", "replace")
            out_text = self._text(text, p)
            return v if out_text is text else out_text
        return v

    def _number(self, v: int | float, p: _Pass) -> Any:
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

    # -- runs and spans ------------------------------------------------------------------------
    def redact_run(self, run: Run) -> Run:
        return self._run(run, _Pass())

    def redact_spans(self, spans: Iterable[SpanData]) -> list[SpanData]:
        return self._spans(list(spans), _Pass())

    def _spans(self, spans: list[SpanData], p: _Pass) -> list[SpanData]:
        if self._spans_clean(spans, p):
            return spans
        return [self._span(s, p) for s in spans]

    # -- the fast path -------------------------------------------------------------------------
    # Most runs hold no secret at all. Walking their values in Python costs more than everything
    # else capture does, so they are first serialized in one C call and scanned once: when the text
    # holds no rule's trigger, no card-shaped digits and no float big enough to be a card, nothing
    # the walk could replace is there, and the walk is skipped. Every rule needs one of those in the
    # value it replaces (or, for a secret's key name, in the key), so the scan can only send
    # clean runs down the slow path, never a secret down the fast one.
    def _nothing_in(self, values: Any, p: _Pass) -> bool:
        """True when no rule could change anything in ``values`` (keys included)."""
        if self._custom or p.literals or not self.builtin:
            return False
        try:
            raw = orjson.dumps(values)
        except (TypeError, ValueError):  # bytes, lone surrogates, foreign types: the walk handles them
            return False
        # A JSON payload in a value may hide a trigger behind an escape ("bob\u0040example.com"), which a
        # reader unescapes; a float big enough to be a card is written with an exponent.
        if _ESCAPED.search(raw) is not None or (b"+" in raw and b"e+1" in raw):
            return False
        if _card_shaped_bytes(raw):
            return False
        return not _maybe_secret(raw.lower().decode() if raw.isascii() else raw.decode().lower())

    def _keys_clean(self, keys: Any) -> bool:
        """Attribute names none of which hides its value (a secret's name) or is itself redacted.

        Known clean names are a set, so a span's names are checked in one C subset test."""
        known = self._clean_keys
        if keys <= known:
            return True
        for key in keys:
            if key not in known:
                if not (type(key) is str and not self._is_secret_key(key)
                        and (not _names_data(key) or self._text(key, _Pass()) is key)):
                    return False
                if len(known) < 10_000:
                    known.add(key)
        return True

    def _spans_clean(self, spans: Sequence[SpanData], p: _Pass) -> bool:
        """The fast path for raw spans. Attribute names are checked apart from the values (as a set of
        names known clean): "gen_ai.usage.input_tokens" holds the trigger "token" but hides nothing.
        A span of an unexpected shape (events or resource not mappings) takes the walk instead."""
        if self._custom or p.literals or not self.builtin:
            return False
        try:
            return self._scan_spans(spans, p)
        except (AttributeError, TypeError):
            return False

    def _scan_spans(self, spans: Sequence[SpanData], p: _Pass) -> bool:
        keys_clean = self._keys_clean
        values: list[Any] = []
        resource = None
        for s in spans:
            attrs = s.attributes
            if not keys_clean(attrs.keys()):
                return False
            values.append(s.name)
            values.append(s.status_message)
            values += attrs.values()
            for e in s.events:
                ea = e.get("attributes") or {}
                if not keys_clean(ea.keys()):
                    return False
                values.append(e.get("name"))
                values += ea.values()
            if s.resource is not resource:  # one per process: checked once
                resource = s.resource
                if not keys_clean(resource.keys()):
                    return False
                values += resource.values()
        return self._nothing_in(values, p)

    def redact_data(self, data: dict[str, Any], spans: list[SpanData]) -> tuple[dict[str, Any], list[SpanData]]:
        """``redact_trace`` of one run in its plain-dict form (``Run.model_dump(mode="json")``) and its spans.

        The values the run's redaction reads (prompt, answer, error message, each call's args, result
        and error message, each model request's args) are redacted as one list; when that changes
        nothing, which is the common case, no ``Run`` model is built. Otherwise, and for field rules
        (whose values are chased into the spans), the run takes the model path.
        """
        if not self._fields or not any(c["name"] in self._fields for c in data["calls"]):
            p = _Pass()
            err = data["error"]
            values = [data["prompt"], data["answer"], err and err["message"],
                      [(c["args"], c["result"], c["error"] and c["error"]["message"]) for c in data["calls"]],
                      [[r["args"] for r in llm["requests"]] for llm in data["llm_calls"]]]
            if self._nothing_in(values, p) or self._value(values, p) is values:
                return data, self._spans(spans, p)
        runs, out = self.redact_trace([Run.model_validate(data)], spans)
        return runs[0].model_dump(mode="json"), out

    def redact_trace(self, runs: Sequence[Run], spans: Sequence[SpanData]) -> tuple[list[Run], list[SpanData]]:
        """Redact runs and their raw spans together: a field rule's value is chased into the spans too."""
        p = _Pass()
        out_runs = [self._run(r, p) for r in runs]
        if p.literals:
            p.memo.clear()
        return out_runs, self._spans(list(spans), p)

    def _run(self, run: Run, p: _Pass) -> Run:
        if self._fields:  # field rules first: the values they hide are then chased through the whole run
            for call in run.calls:
                for kind, parts in self._fields.get(call.name, ()):
                    self._replace_path(call.args if parts[0] == "args" else call.result, parts[1:], kind, p)
            if p.literals:
                p.memo.clear()
        update: dict[str, Any] = {}
        for name in ("prompt", "answer"):
            v = getattr(run, name)
            if v:
                r = self._text(v, p)
                if r is not v:
                    update[name] = r
        if run.error is not None and run.error.message:
            msg = self._text(run.error.message, p)
            if msg is not run.error.message:
                update["error"] = run.error.model_copy(update={"message": msg})
        calls = None
        for i, call in enumerate(run.calls):
            new = self._call(call, p)
            if new is not call:
                if calls is None:
                    calls = list(run.calls)
                calls[i] = new
        if calls is not None:
            update["calls"] = calls
        llm_calls = None
        for i, llm in enumerate(run.llm_calls):
            reqs = None
            for j, req in enumerate(llm.requests):
                args = self._value(req.args, p)
                if args is not req.args:
                    if reqs is None:
                        reqs = list(llm.requests)
                    reqs[j] = req.model_copy(update={"args": args})
            if reqs is not None:
                if llm_calls is None:
                    llm_calls = list(run.llm_calls)
                llm_calls[i] = llm.model_copy(update={"requests": reqs})
        if llm_calls is not None:
            update["llm_calls"] = llm_calls
        return run.model_copy(update=update) if update else run

    def _call(self, call: Any, p: _Pass) -> Any:
        args, result = call.args, call.result
        for kind, parts in self._fields.get(call.name, ()):
            if parts[0] == "args":
                args = self._replace_path(args, parts[1:], kind, p)
            else:
                result = self._replace_path(result, parts[1:], kind, p)
        update: dict[str, Any] = {}
        a = self._value(args, p)
        if a is not call.args:
            update["args"] = a
        r = self._value(result, p)
        if r is not call.result:
            update["result"] = r
        if call.error is not None and call.error.message:
            msg = self._text(call.error.message, p)
            if msg is not call.error.message:
                update["error"] = call.error.model_copy(update={"message": msg})
        return call.model_copy(update=update) if update else call

    def _replace_path(self, value: Any, parts: list[str], kind: str, p: _Pass) -> Any:
        if isinstance(value, str) and value[:1] in ("{", "["):
            try:
                parsed = orjson.loads(value)
            except orjson.JSONDecodeError:
                return value
            new = self._replace_path(parsed, parts, kind, p)
            return value if new is parsed else orjson.dumps(new).decode()
        if not parts:
            if value is None or (isinstance(value, str) and PLACEHOLDER.fullmatch(value)):
                return value
            ph = self.pseudonym(kind, value)
            self._remember(value, ph, p)
            return ph
        head, rest = parts[0], parts[1:]
        if isinstance(value, dict):
            out = None
            for k, v in value.items():
                if head == "*" or str(k) == head:
                    nv = self._replace_path(v, rest, kind, p)
                    if nv is not v:
                        if out is None:
                            out = dict(value)
                        out[k] = nv
            return value if out is None else out
        if isinstance(value, list):
            items = None
            for i, v in enumerate(value):
                if head == "*" or head == str(i):
                    nv = self._replace_path(v, rest, kind, p)
                    if nv is not v:
                        if items is None:
                            items = list(value)
                        items[i] = nv
            return value if items is None else items
        return value

    def _remember(self, value: Any, placeholder: str, p: _Pass) -> None:
        """Record a field value's text forms, so the raw spans lose it wherever it appears."""
        if isinstance(value, dict):
            for v in value.values():
                self._remember(v, placeholder, p)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._remember(v, placeholder, p)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            text = value if isinstance(value, str) else str(value)
            if len(text) >= _LITERAL_MIN_LEN:
                p.literals[text] = placeholder
                escaped = orjson.dumps(text).decode()[1:-1]
                if escaped != text:
                    p.literals[escaped] = placeholder

    def _span(self, s: SpanData, p: _Pass) -> SpanData:
        update: dict[str, Any] = {}
        if s.name:  # names are text too: "GET /reset?token=...", an exporter's "call api_key=..."
            name = self._text(s.name, p)
            if name is not s.name:
                update["name"] = name
        attrs = self._value(s.attributes, p)
        if attrs is not s.attributes:
            update["attributes"] = attrs
        if s.events:
            events = None
            for i, e in enumerate(s.events):
                ea, en = e.get("attributes"), e.get("name")
                na = self._value(ea, p) if ea else ea
                nn = self._text(en, p) if isinstance(en, str) and en else en
                if na is not ea or nn is not en:
                    if events is None:
                        events = list(s.events)
                    events[i] = {**e, "name": nn, "attributes": na}
            if events is not None:
                update["events"] = events
        if s.status_message:
            msg = self._text(s.status_message, p)
            if msg is not s.status_message:
                update["status_message"] = msg
        if s.resource:
            # Every span of a process carries an equal resource: redact it once per pass.
            if p.resource is not None and (p.resource[0] is s.resource or p.resource[0] == s.resource):
                res = p.resource[1]
            else:
                res = self._value(s.resource, p)
                p.resource = (s.resource, res)
            if res != s.resource:
                update["resource"] = res
        return dataclasses.replace(s, **update) if update else s


def redaction_for(config: Any) -> "Redactor | bool":
    """The project's redaction (``[tool.harvester.redact]``): built-in rules plus its own, or off.

    Built now, so a bad rule is a usage error naming the config file, not a failure mid-import.
    """
    rules = config.redact
    if not rules.enabled:
        return False
    try:
        return Redactor(rules.patterns, rules.fields)
    except ValueError as exc:
        raise ConfigError(str(exc), file=config.source, field="redact") from None

