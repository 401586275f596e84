"""harvester ingest / traces list, show, export, prune through click's CliRunner."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.model import Run
from harvester.spans import spans_from_otlp, to_otlp
from harvester.store import TraceStore
from tests.builders.files import readable
from tests.builders.store import agent_trace


@pytest.fixture
def env(tmp_path: Path) -> tuple[CliRunner, str, Path]:
    store = str(tmp_path / "t.db")
    src = tmp_path / "traces.json"
    src.write_bytes(
        orjson.dumps(to_otlp([s for i in (1, 2) for s in agent_trace(f"ab{i:030x}", secret="me@x.example")]))
    )
    return CliRunner(), store, src


def invoke(runner: CliRunner, *args: str, input: bytes | None = None) -> object:
    return runner.invoke(main, list(args), input=input, catch_exceptions=False)


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for cmd in (
        ["ingest"],
        ["traces"],
        ["traces", "list"],
        ["traces", "show"],
        ["traces", "export"],
        ["traces", "prune"],
    ):
        res = runner.invoke(main, [*cmd, "--help"])
        assert res.exit_code == 0 and "Usage" in res.output and len(res.output) > 100


def test_ingest_list_show(env: tuple[CliRunner, str, Path]) -> None:
    runner, store, src = env
    res = invoke(runner, "ingest", str(src), "--store", store)
    assert res.exit_code == 0 and res.output.strip() == "ingested 2 runs from 6 spans (0 skipped)"
    res = invoke(runner, "ingest", "-", "--store", store, "--json", input=src.read_bytes())
    assert orjson.loads(res.output)["runs"] == 2
    res = invoke(runner, "traces", "list", "--store", store)
    lines = res.output.splitlines()
    assert lines[0].split() == ["TRACE", "STARTED", "AGENT", "STOP", "LOST", "FAILURE", "TRAJECTORY", "PROMPT"]
    assert len(lines) == 3 and "kb_search" in lines[1] and "<email:" in lines[1]
    res = invoke(runner, "traces", "list", "--store", store, "--json", "--limit", "1")
    assert Run.from_json(res.output.splitlines()[0]).trace_id.startswith("ab")
    assert "no runs stored match" in invoke(runner, "traces", "list", "--store", store, "--agent", "nobody").output
    assert len(invoke(runner, "traces", "list", "--store", store, "--failed").output.splitlines()) == 3
    tid = f"ab{1:030x}"
    res = invoke(runner, "traces", "show", tid, "--store", store, "--json")
    data = orjson.loads(res.output)
    assert data["trace_id"] == tid and data["requested_tools"] == ["kb_search"] and "blocked_tools" in data
    res = invoke(runner, "traces", "show", tid, "--store", store)
    assert "1. kb_search [ok]" in res.output


def test_show_unknown_and_ambiguous(env: tuple[CliRunner, str, Path]) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    res = runner.invoke(main, ["traces", "show", "ab00ffff", "--store", store])
    assert res.exit_code == 2 and "nearest: ab" in res.output and "harvester ingest" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    res = runner.invoke(main, ["traces", "show", "ab", "--store", store])
    assert res.exit_code == 2 and "ambiguous" in res.output


def test_export(env: tuple[CliRunner, str, Path], tmp_path: Path) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    out = tmp_path / "out.json"
    res = invoke(runner, "traces", "export", f"ab{1:030x}", "--store", store, "-o", str(out))
    assert res.exit_code == 0 and len(list(spans_from_otlp(orjson.loads(out.read_bytes())))) == 3
    res = invoke(runner, "traces", "export", "--store", store)
    assert len(list(spans_from_otlp(orjson.loads(res.output)))) == 6
    res = runner.invoke(main, ["traces", "export", "ffff", "--store", store])
    assert res.exit_code == 2 and "no trace 'ffff'" in res.output


def test_export_lines_streams_a_document_per_100_traces_that_ingest_reads_back(tmp_path: Path) -> None:
    """``--lines``: the Collector's file-exporter form, a line per 100 traces, each trace whole in one
    line; ingesting it into another store gives the same runs."""
    runner = CliRunner()
    store, copy = str(tmp_path / "t.db"), str(tmp_path / "copy.db")
    src = tmp_path / "traces.json"
    src.write_bytes(orjson.dumps(to_otlp([s for i in range(250) for s in agent_trace(f"cd{i:030x}")])))
    invoke(runner, "ingest", str(src), "--store", store)
    out = tmp_path / "out.jsonl"
    assert invoke(runner, "traces", "export", "--lines", "--store", store, "-o", str(out)).exit_code == 0
    lines = out.read_bytes().splitlines()
    per_line = [{s.trace_id for s in spans_from_otlp(orjson.loads(line))} for line in lines]
    assert [len(t) for t in per_line] == [100, 100, 50]
    assert sum(len(list(spans_from_otlp(orjson.loads(line)))) for line in lines) == 750  # whole traces
    res = invoke(runner, "traces", "export", "--lines", "--store", store, "--failed")
    assert len(res.output.splitlines()) == 3  # to stdout alike
    assert invoke(runner, "ingest", str(out), "--store", copy).output.startswith("ingested 250 runs")
    with TraceStore(store, readonly=True) as a, TraceStore(copy, readonly=True) as b:
        assert sorted(a.runs(), key=lambda r: r.trace_id) == sorted(b.runs(), key=lambda r: r.trace_id)


def test_export_lines_names_a_missing_trace_before_writing_anything(
    env: tuple[CliRunner, str, Path], tmp_path: Path
) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    out = tmp_path / "out.jsonl"
    res = runner.invoke(main, ["traces", "export", f"ab{1:030x}", "ffff", "--lines", "--store", store, "-o", str(out)])
    assert res.exit_code == 2 and "no trace 'ffff'" in res.output and not out.exists()
    res = runner.invoke(main, ["traces", "export", "ffff", "--lines", "--store", store])
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "resourceSpans" not in res.output


def test_prune(env: tuple[CliRunner, str, Path]) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    res = invoke(runner, "traces", "prune", "--store", store, "--max-mb", "0")
    assert res.output.strip() == "deleted 2 runs, 0 left"
    assert runner.invoke(main, ["traces", "prune", "--store", store]).exit_code == 2
    invoke(runner, "ingest", str(src), "--store", store)
    res = invoke(runner, "traces", "prune", "--store", store, "--keep-days", "36500", "--json")
    assert orjson.loads(res.output) == {"deleted": 0, "left": 2}


def test_odd_numbers_and_ids_are_one_line_not_a_traceback(env: tuple[CliRunner, str, Path]) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    for limit in ("--max-mb", "--keep-days", "--keep-failed-days"):
        assert (
            invoke(runner, "traces", "prune", "--store", store, limit, "inf").output.strip() == "deleted 0 runs, 2 left"
        )
        res = invoke(runner, "traces", "prune", "--store", store, limit, "nan")
        assert res.exit_code == 2 and "must be a number of 0 or more" in res.output
    res = invoke(runner, "traces", "show", "\U0010ffff", "--store", store)
    assert res.exit_code == 2 and res.output.startswith("error: no trace")


def test_input_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for args in (
        ["ingest", str(bad), "--store", str(tmp_path / "t.db")],
        ["ingest", str(tmp_path / "missing.json"), "--store", str(tmp_path / "t.db")],
        ["traces", "list", "--store", str(tmp_path / "none.db")],
        ["traces", "list", "--store", str(bad)],
        ["traces", "list", "--store", str(tmp_path / "t.db"), "--since", "whenever"],
    ):
        res = runner.invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("error: ") and len(res.output.strip().splitlines()) == 1, res.output


def test_show_says_what_happened_to_each_call(tmp_path: Path) -> None:
    """A denied request is not a null result, and a failed call shows its error."""
    runner, store = CliRunner(), str(tmp_path / "t.db")
    example = Path(__file__).resolve().parents[1] / "traces" / "example"
    invoke(
        runner,
        "ingest",
        str(example / "04-sell-gift-cards.json"),
        str(example / "05-order-a1003.json"),
        "--store",
        store,
    )
    listed = orjson.loads(
        "[" + ",".join(invoke(runner, "traces", "list", "--store", store, "--json").output.splitlines()) + "]"
    )
    by_prompt = {r["prompt"]: r["trace_id"] for r in listed}
    failures = invoke(runner, "traces", "list", "--failed", "--store", store).output
    assert "issue_refund blocked" in failures and "get_order ToolTimeout" in failures
    out = invoke(runner, "traces", "show", by_prompt["Do you sell gift cards?"], "--store", store).output
    assert "issue_refund [blocked]" in out and "-> denied, never executed" in out and "null" not in out
    out = invoke(runner, "traces", "show", by_prompt["Where is order A1003?"], "--store", store).output
    assert "get_order [error]" in out and "-> ToolTimeout: orders-db timeout after 5s" in out


def test_ingest_jobs(env: tuple[CliRunner, str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from harvester.intake import _ingest as ingest

    runner, store, src = env
    res = runner.invoke(main, ["ingest", str(src), "--store", store, "--jobs", "0"])
    assert res.exit_code == 2 and "--jobs" in res.output
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1)  # even this small file goes to the workers
    for jobs in ("1", "2"):
        res = invoke(runner, "ingest", str(src), "--store", store, "--jobs", jobs)
        assert res.exit_code == 0 and res.output.strip() == "ingested 2 runs from 6 spans (0 skipped)"


def test_ingest_and_traces_follow_the_project_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config's store and redaction rules apply to ingest and traces as to every other command."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    (tmp_path / "harvester.toml").write_text('store = "project.db"\n[redact]\npatterns = { order = "A100[0-9]" }\n')
    example = Path(__file__).resolve().parents[1] / "traces" / "example" / "04-sell-gift-cards.json"
    runner = CliRunner()
    assert invoke(runner, "ingest", str(example)).exit_code == 0
    assert (tmp_path / "project.db").is_file() and not (tmp_path / ".harvester").exists()
    listed = invoke(runner, "traces", "list", "--json").output
    assert "A1001" not in listed and "<order:" in listed  # the refund's order id, pseudonymized
    raw = b"".join(readable(p) for p in tmp_path.glob("project.db*"))
    assert b"A1001" not in raw
    (tmp_path / "harvester.toml").write_text('[redact]\npatterns = ["(unclosed"]\n')
    res = runner.invoke(main, ["ingest", str(example)])
    assert res.exit_code == 2 and "harvester.toml" in res.output and "Traceback" not in res.output


def test_only_ingest_creates_a_store(tmp_path: Path) -> None:
    runner, store = CliRunner(), str(tmp_path / "new.db")
    for args in (["traces", "export", "--store", store], ["traces", "prune", "--keep-days", "1", "--store", store]):
        res = runner.invoke(main, args)
        assert res.exit_code == 2 and "no trace store here yet" in res.output
    assert not Path(store).exists()
    example = Path(__file__).resolve().parents[1] / "traces" / "example" / "01-order-a1002.json"
    assert invoke(runner, "ingest", str(example), "--store", store).exit_code == 0 and Path(store).exists()


def test_export_to_an_unwritable_path_is_one_line(env: tuple[CliRunner, str, Path], tmp_path: Path) -> None:
    runner, store, src = env
    invoke(runner, "ingest", str(src), "--store", store)
    (tmp_path / "a-file").write_text("")
    res = runner.invoke(main, ["traces", "export", "--store", store, "-o", str(tmp_path / "a-file" / "x.json")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "cannot write" in res.output
    made = tmp_path / "new" / "folder" / "x.json"  # as every file harvester writes: its folder is made
    assert invoke(runner, "traces", "export", "--store", store, "-o", str(made)).exit_code == 0 and made.is_file()
