"""The rule catalogue: what a secret or a piece of personal data looks like, and cheap tests for it.

Each family of rules is one regex whose alternatives start with a literal or a small character
set (so the regex engine skips ahead instead of trying every position), case-insensitive rules run
on the lowercased text, and card numbers are only searched for when a cheap byte translation shows
a card-shaped run of digits. A string with no candidate costs a few passes of C code. Adding a
rule means a line in ``CASED`` or ``FOLDED`` and, when its literal has no trigger yet, one in
``_TRIGGERS`` (tests/test_redact_fast_path.py keeps every rule behind a trigger).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

__all__ = [
    "PLACEHOLDER",
    "BIG_INT",
    "CAMEL",
    "CARD",
    "CARD_MIN",
    "CASED",
    "CREDENTIAL",
    "ESCAPED",
    "ESCAPES",
    "HIDING_ESCAPES",
    "FOLDED",
    "LOCAL_PART",
    "Rule",
    "SECRET_KEY",
    "base64_like",
    "card_shaped",
    "card_runs",
    "card_shaped_bytes",
    "card_span",
    "clean_ascii",
    "hides_text",
    "kind_name",
    "maybe_secret",
    "names_data",
    "luhn_ok",
    "no_card_in",
    "random_like",
]

PLACEHOLDER = re.compile(r"<[a-z0-9_]+:[0-9a-f]{8}>")

# Each rule: (kind, trigger, pattern). The trigger is a lower-case literal that any match
# contains, checked with ``in`` on the lowercased text first (a C substring search); the pattern
# starts with a literal so that the regex engine jumps between candidates. One alternation of
# everything would try every position and be twenty times slower. A group named ``v``/``w``/``x``
# is the part replaced (the rest stays for readability); without one the whole match is replaced.


def _near(context: str, value: str) -> str:
    """A value that is only a secret near a word naming it ("AWS secret: wJalr...", "Twilio token ...")."""
    return rf"(?i:{context})[^\n]{{0,40}}?(?<![A-Za-z0-9/+])(?P<v>{value})(?![A-Za-z0-9/+=])"


# An AWS secret access key: 40 characters of base64 holding a digit and both cases (a git SHA does not).
_AWS_SECRET = r"(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])[A-Za-z0-9/+]{40}"
CASED: list[tuple[str, str, str]] = [
    ("api_key", "sk-", r"sk-[A-Za-z0-9_-]{16,}"),  # OpenAI sk-..., sk-proj-..., Anthropic sk-ant-...
    ("api_key", "_", r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"),
    ("api_key", "akia", r"AKIA[A-Z0-9]{16}(?![A-Z0-9])"),
    ("api_key", "asia", r"ASIA[A-Z0-9]{16}(?![A-Z0-9])"),
    ("api_key", "xox", r"xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("api_key", "aiza", r"AIza[0-9A-Za-z_-]{35}"),  # Google / Gemini
    ("api_key", "_live_", r"(?:sk|rk)_live_[0-9A-Za-z]{16,}"),  # Stripe
    ("api_key", "_test_", r"(?:sk|rk)_test_[0-9A-Za-z]{16,}"),
    ("api_key", "hf_", r"hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    ("gitlab_token", "glpat-", r"glpat-[A-Za-z0-9_-]{20,}"),
    ("sendgrid_key", "sg.", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    ("npm_token", "npm_", r"npm_[A-Za-z0-9]{36}"),
    *(("twilio", sid.lower(), sid + r"[0-9a-f]{32}(?![0-9A-Za-z])") for sid in ("SK", "AC")),  # API key, account
    ("twilio", "twilio", _near("twilio", r"[0-9a-f]{32}")),  # an auth token named as Twilio's
    *(("aws_secret", word, _near(word, _AWS_SECRET)) for word in ("aws", "secret")),
    # A secret key in the row or line of its key id: AWS's credentials CSV ("AKIA...,wJalr..."), a pair
    # pasted on one line. The id is kept in the match (not replaced) so that its own rule still takes it.
    *(
        ("aws_secret", kind.lower(), _near(f"(?-i:{kind}[A-Z0-9]{{16}})(?![A-Z0-9])", _AWS_SECRET))
        for kind in ("AKIA", "ASIA")
    ),
    *(  # and a secret key before its key id ("wJalr...,AKIA...": a hand-made CSV, "secret id" pairs)
        (
            "aws_secret",
            kind.lower(),
            rf"(?<![A-Za-z0-9/+])(?P<v>{_AWS_SECRET})(?![A-Za-z0-9/+=])[^\n]{{0,40}}?(?-i:{kind}[A-Z0-9]{{16}})(?![A-Z0-9])",
        )
        for kind in ("AKIA", "ASIA")
    ),
    (
        "private_key",
        "private key-----",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?P<v>[^<]{1,16384}?)-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    ),
    (
        "slack_webhook",
        "hooks.slack.com/",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/-]{16,})",
    ),
    ("token", "eyj", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # a bare JWT
    ("secret", "sig=", r"[?&]sig=(?P<v>[A-Za-z0-9%+/=]{16,})"),  # Azure SAS signature
    ("token", "basic", r"(?i:basic)\s+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
    ("password", "@", r"://[^/\s:@\"'<>]{1,256}:(?P<v>[^/\s@\"'<>]{1,256})@"),
    (
        "email",
        "@",
        r"@(?P<v>[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*"
        r"\.[A-Za-z]{2,24})(?![A-Za-z0-9-])",
    ),
]
# Case-insensitive rules, written in lower case and run on the lowercased text.
_VALUE = (
    r"[\"']?\s{0,3}[:=]\s{0,3}(?:\"(?P<v>(?:[^\"\\\n]|\\.){1,512})\"|'(?P<w>[^'\n]{1,512})'"
    r"|(?P<x>[^\s\"'&,;}\])<]{4,512}))"
)
# A password told in prose ("my password is hunter2!", "密码是hunter2"): a word, so only one holding a
# digit or a symbol is taken ("the password is incorrect" holds none).
_PROSE = (
    r"\s*(?=[^\s\"'<>]{0,127}[0-9!#$%^&*@_+=~-])(?P<v>[^\s\"'<>,;\uff0c\u3002\u3001]{3,127}"
    r"[^\s\"'<>,;.!?)\uff0c\u3002\u3001])"
)
# (a word, what follows it) before the password, the word its trigger: English, Spanish, French, German,
# Portuguese, Russian, Chinese, Japanese, Korean. Escaped: several of these letters look like Latin ones.
_PROSE_WORDS = (
    ("passw", r"(?:or)?d\s+(?:is|was)"),
    ("contrase\u00f1a", r"\s+es"),
    ("mot de passe", r"\s+(?:est|:)"),
    ("passwort", r"\s+(?:ist|lautet)"),
    ("senha \u00e9", ""),
    ("\u043f\u0430\u0440\u043e\u043b\u044c", r"(?:\s*[:\uff1a\u2014-]|\s+\u044d\u0442\u043e)"),  # пароль: / пароль это
    ("\u5bc6\u7801", r"(?:\u662f|\u4e3a|:|\uff1a)"),  # 密码是 / 密码为
    ("\u30d1\u30b9\u30ef\u30fc\u30c9", r"(?:\u306f|:|\uff1a)"),  # パスワードは
    ("\ube44\ubc00\ubc88\ud638", r"(?:\ub294|:|\uff1a)"),  # 비밀번호는
)
FOLDED: list[tuple[str, str, str]] = [
    ("token", "bearer", r"bearer\s+(?P<v>[a-z0-9._~+/-]{8,}=*)"),
    ("aws_secret", "aws_", r"aws_secret_access_key" + _VALUE),
    ("azure_key", "key", r"(?:account|sharedaccess)key" + _VALUE),  # Azure storage / Service Bus connection strings
    *(("password", word, word + after + _PROSE) for word, after in _PROSE_WORDS),
    ("secret", "key", r"(?:api|private|secret|access)[_-]?key" + _VALUE),
    *(("secret", word[:5], word + _VALUE) for word in ("token", "secret", r"passw(?:or)?d", "pwd", r"credentials?")),
    # A cookie header's value is every pair up to the end of the line; an authorization value is its
    # scheme word and credential ("Token 9944b0..."). "Authorization: Bearer/Basic ..." is left to
    # those rules, which keep the scheme readable. Both must hold a digit or "=" (see CREDENTIAL).
    ("credential", "cooki", r"(?:set-)?cookie" + _VALUE.replace(r"[^\s\"'&,;}\])<]{4,512}", r"[^\n\"'<]{4,1024}")),
    (
        "credential",
        "autho",
        r"authorization"
        + _VALUE.replace(r"\s{0,3}(?:", r"\s{0,3}(?![\"']?(?:bearer|basic)\s)(?:", 1).replace(
            r"(?P<x>", r"(?P<x>(?:[a-z]{2,12}\s)?", 1
        ),
    ),
]
CREDENTIAL = re.compile(r"[0-9=]")
# Dict keys and span attribute names whose (string) value is a secret as a whole.
# Matched against the key with camelCase split ("awsSecretAccessKey" -> "aws_Secret_Access_Key").
SECRET_KEY = re.compile(
    r"(?:^|[^a-z0-9])(?:api[_ -]?key|access[_ -]?key|access[_ -]?token|auth[_ -]?token|refresh[_ -]?token"
    r"|id[_ -]?token|token|secret|client[_ -]?secret|secret[_ -]?key|private[_ -]?key|password|passwd|pwd"
    r"|authorization|cookie|credentials?)$",
    re.I,
)
CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Any trigger at all: most strings have none and stop here. Every rule's match and every SECRET_KEY
# name, lowercased, contains one of these, so a JSON payload without any (and without a card-shaped
# run of digits) has nothing to replace and is not parsed. Each is its own search, starting at a
# literal (the regex engine then jumps between candidates in C, ~0.3 ns a character), and the
# rarest are skipped when one of their characters is absent (a memchr): one alternation of all of
# them tries every position and costs ten times as much, and every string of every run pays this.
# A gate of one character is a memchr; a longer one is a whole search (~3 us over a 5 KB trace), so
# a new rule's trigger joins an existing search where it can ("aws" the "w" one).
_TRIGGER_PATTERNS = tuple(
    (gate, pattern)
    for gate, pattern in (
        ("@", "@"),  # emails, passwords in URLs
        # key, token, cookie, AKIA, sk-, sk_test_/sk_live_, hooks.slack.com/, Twilio's SK + 32 hex
        ("k", r"k(?:ey|en|ie|ia|-|_t|_l|\.com/|[0-9a-f]{32})"),
        ("b", r"b(?:earer|asi|_p)"),  # bearer, basic (also "BASİC"), github_pat_
        ("w", r"w(?:(?:or)?d|ort|ilio|s(?<=aws)(?<![a-z]aws))"),  # password, passwd, pwd, passwort, twilio, AWS
        ("_", r"_(?<=h[pousr]_|hf_|pm_)"),  # ghp_ and its kin, hf_, npm_
        ("c", r"c(?:re|[0-9a-f]{32})"),  # secret, credential, Twilio's AC + 32 hex (cookie: the k gate's "kie")
        ("z", "za"),  # authorization, AIza
        ("j", "yj"),  # eyJ (a JWT)
        ("=", "g="),  # sig= (Azure SAS)
        ("x", "xox"),  # Slack
        ("glpat-", "glpat-"),  # GitLab
        ("s", r"s(?:g\.[a-z0-9_-]{22}\.|se(?<=mot de passe)|ia(?<=asia))"),  # SendGrid, French prose, AWS ASIA...
    )
)
_TRIGGERS = tuple((gate, re.compile(pattern).search) for gate, pattern in _TRIGGER_PATTERNS)
# Triggers only non-ASCII text can hold, skipped for the (common) ASCII string.
_TRIGGERS_UNICODE = tuple(trigger for trigger, _ in _PROSE_WORDS if not trigger.isascii())


# Letters that case-insensitive rules (and the secret-key test) match as ASCII but that lowercasing
# leaves apart: dotless ı and long ſ; İ lowercases to i plus a combining dot, which goes.
_FOLD = {0x131: "i", 0x17F: "s", 0x307: None}


# The fast path's one pass over serialized ASCII text (``clean_ascii``): letters lowered and digits made
# '0' in a single translation, which both the triggers (their digit classes hold '0') and the card run read.
_FOLDED = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", b"abcdefghijklmnopqrstuvwxyz" + b"0" * 10)
_TRIGGERS_FOLDED = tuple((gate.encode(), re.compile(pattern.encode()).search) for gate, pattern in _TRIGGER_PATTERNS)
_CARD_RUN_FOLDED = re.compile(rb"0(?:[ -]?0){12}")  # 13 digits, a single separator allowed between any two


def clean_ascii(raw: bytes) -> bool:
    """For ASCII text: no card number (``no_card_in``, asked only of a card-shaped run of digits) and no
    rule's trigger (``maybe_secret``)."""
    folded = raw.translate(_FOLDED)
    hit = _CARD_RUN_FOLDED.search(folded)
    if hit is not None and not no_card_in(raw, _CARD_RUN_FOLDED.finditer(folded, hit.start())):
        return False
    for gate, search in _TRIGGERS_FOLDED:
        if gate in folded and search(folded) is not None:
            return False
    return True


def maybe_secret(low: str) -> bool:
    """Whether lowercased text holds any rule's trigger (a cheap superset of "some rule matches")."""
    if not low.isascii():
        low = low.translate(_FOLD)
        if any(word in low for word in _TRIGGERS_UNICODE):
            return True
    for gate, search in _TRIGGERS:
        if gate in low and search(low) is not None:
            return True
    return False


# Escapes in JSON or a repr ("...\\napi_key=...") end a word as well as a space does.
ESCAPES = ("\\n", "\\t", "\\r")
CARD_MIN = 10**12  # a card number has 13 digits or more
BIG_INT = re.compile(r"[0-9]{20}")
CARD = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
# Bytes -> digits '0', separators '1', everything else '2': a card leaves 13 '0's, a '1' between any two.
_CARD_SHAPE = bytes.maketrans(
    bytes(range(256)),
    b"".join(b"0" if chr(i).isdigit() and i < 128 else b"1" if i in (32, 45) else b"2" for i in range(256)),
)
# JSON escapes a reader turns back into text a rule may match: "\\u0040" is "@", and "\\/" is "/" (some
# encoders escape every slash: "https:\\/\\/hooks.slack.com\\/services\\/..." is a Slack webhook once read).
HIDING_ESCAPES = ("\\u", "\\/")
ESCAPED = re.compile(b"|".join(re.escape(e.encode()) for e in HIDING_ESCAPES))  # one in serialized JSON text
# In a _CARD_SHAPE translation: 13 digits, a single separator allowed between any two (as ``CARD`` reads
# them: "38414-25-003799" is 13 digits, whatever its groups)
_CARD_RUN = re.compile(b"0(?:1?0){12}")
_WORDY = re.compile("[g-z]{3}")
LOCAL_PART = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")


def card_shaped(s: str) -> bool:
    """A cheap test (one C translation) for a run of digits long enough to be a card number."""
    return len(s) >= 13 and card_shaped_bytes(s.encode("utf-8", "surrogatepass"))


def hides_text(s: str) -> bool:
    """Whether JSON text ``s`` writes characters as escapes (``HIDING_ESCAPES``) that a reader unescapes."""
    return any(e in s for e in HIDING_ESCAPES)


def card_shaped_bytes(raw: bytes) -> bool:
    return _CARD_RUN.search(raw.translate(_CARD_SHAPE)) is not None


def card_runs(raw: bytes) -> Iterator[re.Match[bytes]]:
    """Where card-shaped runs of digits start in ``raw`` (for ``no_card_in``)."""
    return _CARD_RUN.finditer(raw.translate(_CARD_SHAPE))


_ODATA_ANNOTATION = re.compile(r"[\w.]*@odata\.[\w.]+")


def names_data(key: str) -> bool:
    """A key or name that may hold a secret or personal data ({"bob@example.com": ...}, {"sk-...": ...}),
    redacted as text: long enough for the shortest built-in match, and not an OData annotation
    ("members@odata.bind", the whole key), which only looks like an email. A key that merely holds
    "@odata." among other text is text like any other (a card number beside it was kept)."""
    return len(key) >= 6 and _ODATA_ANNOTATION.fullmatch(key) is None


def random_like(token: str) -> bool:
    """A token right after an ASCII letter is a key written into a word ("APIkeysk-Ab3..."), not part of
    the word ("task-assignment-for-customer-42"), only when it looks random: a digit, and both cases,
    or no run of letters a hex digit cannot be (uppercase keys, hex)."""
    if not any(c.isdigit() for c in token):
        return False
    return (not token.islower() and not token.isupper()) or _WORDY.search(token) is None


def base64_like(value: str) -> bool:
    """An HTTP Basic credential is base64, not a word ("basic troubleshooting", "BASIC SETTINGS")."""
    return not (value.isalpha() and (value.islower() or value.isupper() or value[1:].islower()))


_GROUP = re.compile("[0-9]+")


def card_span(run: str) -> tuple[int, int] | None:
    """Where a card number lies in a run of digits and single separators: all of it when it passes Luhn,
    else the longest stretch of whole groups of 3 or more digits that is one ("4111 1111 1111 1111 2",
    "2 4111-1111-1111-1111"): the regex takes the longest run, and a digit beside a card must not hide it."""
    if luhn_ok(run.replace(" ", "").replace("-", "")):
        return 0, len(run)
    groups = [(m.start(), m.end()) for m in _GROUP.finditer(run)]
    best: tuple[int, int, int] | None = None  # start, end, digits
    for i in range(len(groups)):
        digits = 0
        for j in range(i, len(groups)):
            a, b = groups[j]
            if b - a < 3:
                break
            digits += b - a
            if digits > 19:
                break
            if digits >= 13 and (best is None or digits > best[2]):
                start, end = groups[i][0], b
                if luhn_ok(run[start:end].replace(" ", "").replace("-", "")):
                    best = (start, end, digits)
    return None if best is None else (best[0], best[1])


def no_card_in(raw: bytes, hits: Iterable[re.Match[bytes]]) -> bool:
    """Whether serialized values (``raw``, UTF-8) hold no card number the walk would replace, ``hits``
    being where a card-shaped run of digits starts in them (``card_runs``, or the folded form's).

    A card-shaped run is common where no card is: a UUID's groups ("4382-9040-310c"), a timestamp,
    an order number. Every process's resource holds a random UUID (``service.instance.id``), one in
    seven of them card-shaped, and the fast path used to send every trace of such a process down the
    walk. The walk's own test decides instead, on the run of digits and separators around each hit:
    each match of ``CARD`` in it, as ``_find`` and ``_number`` read it, must fail ``card_span``
    (Luhn). A match beside a point or an exponent is part of a number that a payload's walk reads as
    the number it is (4.111111111111111e15), so it is left to the walk. JSON's separators and escapes
    break a run as the values' own text does, and ``[0-9]`` is ASCII only, in text as in bytes.
    """
    checked = 0
    for hit in hits:
        start = hit.start()
        if start < checked:
            continue  # inside a run already read
        while start and raw[start - 1] in _RUN_BYTES:
            start -= 1
        end = _RUN_END.match(raw, hit.end()).end()  # type: ignore[union-attr]  # matches the empty run
        checked = end
        for m in _CARD_BYTES.finditer(raw, start, end):
            a, b = m.span()
            if raw[a - 1 : a] in _NUMBER_EDGE or raw[b : b + 1] in _NUMBER_EDGE:
                return False
            if card_span(m.group().decode()) is not None:
                return False
    return True


_CARD_BYTES = re.compile(CARD.pattern.encode())
_RUN_BYTES = frozenset(b"0123456789 -")
_RUN_END = re.compile(rb"[0-9 -]*")
_NUMBER_EDGE = (b".", b"e", b"E")


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum every card number passes (and ~90% of other digit runs fail)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class Rule:
    """One compiled rule: its kind, the literal every match holds, and which group is replaced."""

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


def kind_name(text: str) -> str:
    """A placeholder kind from a user's name for a rule or a field (``"SSN #"`` -> ``ssn``)."""
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "redacted"
