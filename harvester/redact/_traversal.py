"""The traversal: runs and raw spans redacted together, with a fast path for the common clean run.

Applied before anything is written, on by default. A field rule (``{"get_customer":
["result.ssn"]}``) hides a call's whole value and then chases that value's text into the raw spans,
so the run read back from them loses it too. Speed matters because this runs on the capture worker
for every span of every run: most runs hold no secret, and they are recognised in one serialisation
and one scan (``Engine._nothing_in``) instead of a walk in Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..canonical import split_path
from ..model import RunData
from ..spans import SpanData
from ._engine import Engine, Pass
from ._rules import PLACEHOLDER, kind_name, names_data

if TYPE_CHECKING:
    from ..model import Run

__all__ = ["Redactor"]

_LITERAL_MIN_LEN = 4  # a field value shorter than this is not chased into the raw spans


class Redactor(Engine):
    """Compiled redaction rules. Build once; every method is safe to call from several threads.

    ``patterns``: extra regexes, a list (kind ``custom``) or a mapping kind -> regex; when a
    pattern has a group, only its first group is replaced. ``fields``: per-tool paths whose whole
    value is replaced, ``{"get_customer": ["result.ssn", "args.card"]}`` (``*`` matches any key).
    ``builtin=False`` keeps only your rules.
    """

    def __init__(
        self,
        patterns: Iterable[str] | Mapping[str, str] | None = None,
        fields: Mapping[str, Iterable[str]] | None = None,
        *,
        key: str | bytes | None = None,
        builtin: bool = True,
    ) -> None:
        super().__init__(patterns, key=key, builtin=builtin)
        self._fields: dict[str, list[tuple[str, list[str]]]] = {}
        for tool, paths in (fields or {}).items():
            for path in paths:
                parts = split_path(path)
                if len(parts) < 2 or parts[0] not in ("args", "result"):
                    raise ValueError(f"redaction field path {path!r} of tool {tool!r} must start with args. or result.")
                kind = kind_name(next((p for p in reversed(parts) if p != "*"), "field"))
                self._fields.setdefault(tool, []).append((kind, parts))
        self._clean_keys: set[Any] = set()

    @classmethod
    def from_option(cls, option: bool | Redactor | Mapping[str, Any] | None) -> Redactor | None:
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

    # -- runs and spans ------------------------------------------------------------------------
    def redact_run(self, run: Run) -> Run:
        return self._run(run, Pass())

    def redact_spans(self, spans: Iterable[SpanData]) -> list[SpanData]:
        return self._spans(list(spans), Pass())

    def _spans(self, spans: list[SpanData], p: Pass) -> list[SpanData]:
        if self._spans_clean(spans, p):
            return spans
        return [self._span(s, p) for s in spans]

    def _keys_clean(self, keys: Any) -> bool:
        """Attribute names none of which hides its value (a secret's name) or is itself redacted.

        Known clean names are a set, so a span's names are checked in one C subset test."""
        known = self._clean_keys
        if keys <= known:
            return True
        for key in keys:
            if key not in known:
                if not (
                    type(key) is str
                    and not self._is_secret_key(key)
                    and (not names_data(key) or self._text(key, Pass()) is key)
                ):
                    return False
                if len(known) < 10_000:
                    known.add(key)
        return True

    def _spans_clean(self, spans: Sequence[SpanData], p: Pass) -> bool:
        """The fast path for raw spans. Attribute names are checked apart from the values (as a set of
        names known clean): "gen_ai.usage.input_tokens" holds the trigger "token" but hides nothing.
        A span of an unexpected shape (events or resource not mappings) takes the walk instead."""
        if self._custom or p.literals or not self.builtin:
            return False
        try:
            return self._scan_spans(spans, p)
        except (AttributeError, TypeError):
            return False

    def _scan_spans(self, spans: Sequence[SpanData], p: Pass) -> bool:
        keys_clean = self._keys_clean
        values: list[Any] = []
        resource = None
        for s in spans:
            attrs = s.attributes
            if not keys_clean(attrs.keys()):
                return False
            values.append(s.name)
            values.append(s.scope)
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

    def redact_data(self, data: RunData, spans: list[SpanData]) -> tuple[RunData, list[SpanData]]:
        """``redact_trace`` of one run in its plain-dict form (``RunData``) and its spans.

        The values the run's redaction reads (agent names, prompt, answer, error message, each call's
        name, args, result and error message, each model call's tool requests, what it was asked and its text,
        the history) are
        redacted as one list; when that changes
        nothing, which is the common case, no ``Run`` model is built. Otherwise, and for field rules
        (whose values are chased into the spans), the run takes the model path.
        """
        if not self._fields or not any(c["name"] in self._fields for c in data["calls"]):
            p = Pass()
            err = data["error"]
            values = [
                data["agent"],
                data["prompt"],
                data["answer"],
                err and err["message"],
                [(c["name"], c["args"], c["result"], c["error"] and c["error"]["message"]) for c in data["calls"]],
                [
                    ([(r["name"], r["args"]) for r in llm["requests"]], llm.get("request"), llm.get("text"))
                    for llm in data["llm_calls"]
                ],
                data.get("history"),
                data.get("agents"),
            ]
            if self._nothing_in(values, p) or self._value(values, p) is values:
                return data, self._spans(spans, p)
        from ..model import Run  # only here: the hook's common path builds no pydantic model

        runs, out = self.redact_trace([Run.from_data(data)], spans)
        return runs[0].to_data(), out

    def redact_tool_value(self, tool: str, part: str, value: Any) -> Any:
        """A call's ``args`` or ``result`` (``part``) as a run's redaction leaves it: ``tool``'s field
        rules, then every other rule. A value a field rule replaced already (a placeholder) stays."""
        p = Pass()
        for kind, parts in self._fields.get(tool, ()):
            if parts[0] == part:
                value = self._replace_path(value, parts[1:], kind, p)
        return self._value(value, p)

    def redact_trace(self, runs: Sequence[Run], spans: Sequence[SpanData]) -> tuple[list[Run], list[SpanData]]:
        """Redact runs and their raw spans together: a field rule's value is chased into the spans too."""
        p = Pass()
        out_runs = [self._run(r, p) for r in runs]
        if p.literals:
            p.memo.clear()
        return out_runs, self._spans(list(spans), p)

    def _run(self, run: Run, p: Pass) -> Run:
        if self._fields:  # field rules first: the values they hide are then chased through the whole run
            for call in run.calls:
                for kind, parts in self._fields.get(call.name, ()):
                    self._replace_path(call.args if parts[0] == "args" else call.result, parts[1:], kind, p)
            if p.literals:
                p.memo.clear()
        update: dict[str, Any] = {}
        for name in ("agent", "prompt", "answer"):  # an agent may be named by its owner's email
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
            changed = self._llm_call(llm, p)
            if changed is not llm:
                if llm_calls is None:
                    llm_calls = list(run.llm_calls)
                llm_calls[i] = changed
        if llm_calls is not None:
            update["llm_calls"] = llm_calls
        if run.history:
            history = self._history(run.history, p)
            if history is not run.history:
                update["history"] = history
        agents = self._value(run.agents, p) if run.agents else run.agents
        if agents is not run.agents:
            update["agents"] = agents
        return run.model_copy(update=update) if update else run

    def _llm_call(self, llm: Any, p: Pass) -> Any:
        """A model call with its tool requests, what it was asked (a case's model fixture) and its text redacted."""
        update = self._changed({"text": llm.text}, p) if llm.text else {}
        reqs = self._requests(llm.requests, p)
        if reqs is not llm.requests:
            update["requests"] = reqs
        if llm.request is not None:
            asked = llm.request.model_dump(mode="json")
            redacted = self._value(asked, p)
            if redacted is not asked:
                update["request"] = type(llm.request).model_validate(redacted)
        return llm.model_copy(update=update) if update else llm

    def _requests(self, requests: list[Any], p: Pass) -> list[Any]:
        """Tool requests with their names and args redacted: a tool name is text like any other."""
        out = None
        for j, req in enumerate(requests):
            update = self._changed({"name": req.name, "args": req.args}, p)
            if update:
                if out is None:
                    out = list(requests)
                out[j] = req.model_copy(update=update)
        return requests if out is None else out

    def _history(self, history: list[Any], p: Pass) -> list[Any]:
        """The conversation before the turn: its messages and the tool calls they asked for."""
        out = None
        for i, msg in enumerate(history):
            update: dict[str, Any] = {}
            if msg.content:
                update = self._changed({"content": msg.content}, p)
            calls = self._requests(msg.tool_calls, p)
            if calls is not msg.tool_calls:
                update["tool_calls"] = calls
            if update:
                if out is None:
                    out = list(history)
                out[i] = msg.model_copy(update=update)
        return history if out is None else out

    def _changed(self, fields: dict[str, Any], p: Pass) -> dict[str, Any]:
        """The fields whose redaction differs from them, redacted (a model's update)."""
        update = {}
        for name, v in fields.items():
            r = self._value(v, p)
            if r is not v:
                update[name] = r
        return update

    def _call(self, call: Any, p: Pass) -> Any:
        args, result = call.args, call.result
        for kind, parts in self._fields.get(call.name, ()):
            if parts[0] == "args":
                args = self._replace_path(args, parts[1:], kind, p)
            else:
                result = self._replace_path(result, parts[1:], kind, p)
        update = self._changed({"name": call.name}, p)
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

    # -- field rules ---------------------------------------------------------------------------
    def _replace_path(self, value: Any, parts: list[str], kind: str, p: Pass) -> Any:
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

    def _remember(self, value: Any, placeholder: str, p: Pass) -> None:
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

    # -- raw spans -----------------------------------------------------------------------------
    def _span(self, s: SpanData, p: Pass) -> SpanData:
        update: dict[str, Any] = {}
        for field in ("name", "scope"):  # names are text too: "GET /reset?token=...", a scope "acme-sk-..."
            name = getattr(s, field)
            if name:
                new = self._text(name, p)
                if new is not name:
                    update[field] = new
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
