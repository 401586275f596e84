"""Every registered backend through the same contract: what it declares, the URL that names it, a
trace read from a fake of its API on 127.0.0.1 and from a file saved from it, its credentials; and
the CLI's help and the docs table are the registry's.

A backend is registered in ``harvester/intake/backends/_registry.py``; its conformance entry (how
its API answers, what a saved trace looks like) is its line in ``tests/builders/backends.py``'s
``FAKES``. Regenerate the docs table with ``python tests/test_backend_conformance.py --update``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.conventions import runs_from_spans
from harvester.errors import BackendError, InputError, NotFoundError
from harvester.intake.backends import (
    BACKENDS,
    READERS,
    Backend,
    BackendReader,
    Target,
    parse_target,
    pull,
    reader,
    spans_of_export,
)
from harvester.spans import SpanData, spans_from_otlp
from tests.builders.backends import FAKES, loopback, reply, serving
from tests.builders.backends import Backend as Served

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "backends"
START, END = "<!-- backends:start -->", "<!-- backends:end -->"
# Two conventions, a failed tool and a denied one: what every backend must read back as it was sent.
SCENARIOS = ["pydantic-ai-tool_error", "langchain-openinference-denied"]
NAMES = list(READERS)
TID = "ab" * 16


def traces() -> dict[str, list[SpanData]]:
    out: dict[str, list[SpanData]] = {}
    for name in SCENARIOS:
        for span in spans_from_otlp(orjson.loads((ROOT / "traces" / "frameworks" / f"{name}.json").read_bytes())):
            out.setdefault(span.trace_id, []).append(span)
    assert all(dumped(spans) for spans in out.values())  # each holds a run to compare
    return out


def dumped(spans: list[SpanData]) -> list[dict]:
    """The runs, but for the SDK instrumentation named by scope: Phoenix and MLflow store no scope."""
    return [{k: v for k, v in r.model_dump().items() if k != "instrumentation"} for r in runs_from_spans(spans)]


# -- what a backend declares -------------------------------------------------------------------
def test_every_registered_backend_has_a_conformance_entry():
    assert set(FAKES) == set(READERS), "give each backend its FAKES entry in tests/builders/backends.py"


@pytest.mark.parametrize("name", NAMES)
def test_it_declares_itself_and_has_every_member_of_the_protocol(name):
    mod = reader(name)
    assert isinstance(mod, BackendReader)
    b = mod.BACKEND
    assert isinstance(b, Backend) and b.name == name
    assert [other.name for other in BACKENDS].count(name) == 1  # READERS would hide a second one
    assert re.fullmatch(r"[a-z][a-z0-9]*", name) and name not in ("http", "https")  # a scheme of its own
    assert 0 < b.port < 65536
    assert b.label and b.export and b.label in b.export
    assert b.scope is None or re.fullmatch(r"[a-z]+", b.scope)


@pytest.mark.parametrize("name", NAMES)
def test_its_url_form_names_it(name):
    b = reader(name).BACKEND
    assert parse_target(f"{name}://127.0.0.1") == Target(name, f"http://127.0.0.1:{b.port}")
    assert parse_target(f"{name.upper()}+https://h.example:8443").base_url == "https://h.example:8443"
    if b.scope:
        assert parse_target(f"{name}://h/a%20b").scope == "a b"
    else:
        with pytest.raises(InputError, match=f"{name} has no projects"):
            parse_target(f"{name}://h/a")
    with pytest.raises(InputError, match=re.escape(b.url_form)):  # an unknown scheme lists every form
        parse_target("nosuchbackend://h")


# -- what it reads -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_it_reads_a_trace_from_its_api_as_it_was_sent(name):
    held = traces()
    with serving(Served(name, held)) as backend:
        for tid, spans in held.items():
            got = pull(backend.url, [tid])
            assert got.target.backend == name and list(got.traces) == [tid]
            assert dumped(got.traces[tid]) == dumped(spans), tid
        found = pull(backend.url, since_ns=0)  # every trace, by its search
        assert set(found.traces) == set(held)
        with pytest.raises(NotFoundError, match="holds no trace"):
            pull(backend.url, ["f" * 32])


@pytest.mark.parametrize("name", NAMES)
def test_a_trace_saved_from_it_is_read_back_and_claimed_by_it_alone(name):
    for tid, spans in traces().items():
        doc = FAKES[name].export(spans)
        assert dumped(spans_of_export(orjson.dumps(doc), "saved.json")) == dumped(spans), tid
        assert reader(name).from_export(doc, "saved.json") is not None
        others = [o for o in NAMES if o != name and reader(o).from_export(doc, "saved.json") is not None]
        assert not others, f"{others} read {name}'s saved form as their own"


# -- its credentials ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_each_credential_it_declares_makes_a_header_and_a_401_names_them(name, monkeypatch):
    b = reader(name).BACKEND
    for other in BACKENDS:
        for variable in other.variables:
            monkeypatch.delenv(variable, raising=False)
    assert reader(name).headers() == {}
    for variable in b.variables:
        monkeypatch.setenv(variable, "name=value")
        assert reader(name).headers(), f"{variable} is declared but makes no header"
        monkeypatch.delenv(variable)
    with loopback(_unauthorized) as server:
        with pytest.raises(BackendError, match=re.escape(f"401 unauthorized (set {b.credentials})")):
            pull(server.url(name), [TID])


def _unauthorized(request, _) -> None:
    reply(request, 401, {"error": "unauthorized"})


# -- the CLI and the docs read the registry ----------------------------------------------------
def _help(*command: str) -> str:
    res = CliRunner().invoke(main, [*command, "--help"], terminal_width=1000)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


@pytest.mark.parametrize("command", [["import"], ["incident"], ["rerecord"]])
def test_the_cli_names_every_backend_from_the_registry(command):
    text = _help(*command)
    for b in BACKENDS:
        assert b.url_form in text, (command, b.name)
        if command != ["import"]:
            assert b.label in text.split("--file", 1)[1], (command, b.name)


def docs_table() -> str:
    """The table of docs/backends/index.md, from the registry: a backend's row links its page, if
    it has one (titled by the page's heading)."""
    rows = [
        "| backend | URL | credentials (environment only) | a saved trace (`--file`) |",
        "| --- | --- | --- | --- |",
    ]
    for b in BACKENDS:
        page = PAGES / f"{b.name}.md"
        title = page.read_text().splitlines()[0].removeprefix("# ") if page.is_file() else b.label
        shown = f"[{title}]({b.name}.md)" if page.is_file() else title
        url = b.url_form.replace(":port", f":{b.port}")
        credentials = re.sub("|".join(map(re.escape, b.variables)) or "^$", lambda m: f"`{m[0]}`", b.credentials)
        rows.append(f"| {shown} | `{url}` | {credentials} | {b.export} |")
    return "\n".join(rows)


def test_the_docs_table_is_the_registry():
    text = (PAGES / "index.md").read_text()
    assert text.split(START, 1)[1].split(END, 1)[0].strip() == docs_table(), (
        "docs/backends/index.md is stale: run `python tests/test_backend_conformance.py --update`"
    )


@pytest.mark.parametrize("name", NAMES)
def test_its_page_if_any_names_its_credentials(name):
    page = PAGES / f"{name}.md"
    if page.is_file():
        missing = [v for v in reader(name).BACKEND.variables if v not in page.read_text()]
        assert not missing, f"docs/backends/{name}.md does not name {missing}"


if __name__ == "__main__" and "--update" in sys.argv:
    index = PAGES / "index.md"
    head, rest = index.read_text().split(START, 1)
    index.write_text(head + START + "\n" + docs_table() + "\n" + END + rest.split(END, 1)[1])
