"""Case files, config and the demo against hostile or broken input (issue #16): ids that climb out of
cases/, symlinks planted where a file is written, devices and FIFOs where one is read, a config that is
not UTF-8, and a demo whose first line must count what it captured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester import _files
from harvester.case import AgentCase, CaseFolder, load_case, load_cases, save_case
from harvester.cli import main
from harvester.config import load_config
from harvester.errors import CaseFileError, ConfigError, InputError
from harvester.suite import bump_suite
from tests.builders.cli import one_line_error

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX symlinks")


def make_case(case_id: str = "refund", status: str = "pending") -> AgentCase:
    return AgentCase(id=case_id, status=status, why="protects refunds", prompt="Refund order A1001")


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


# -- 1. ids from the command line -------------------------------------------------------------------
@pytest.fixture
def outside(tmp_path: Path) -> tuple[Path, Path]:
    """A cases folder and, two levels up from its pending/, a valid case file that must never be imported."""
    cases = tmp_path / "project" / "cases"
    save_case(make_case("kept"), cases / "pending")
    evil = tmp_path / "project" / "outside"
    evil.mkdir()
    (evil / "evil.json").write_bytes(
        (tmp_path / "project/cases/pending/kept.json").read_bytes().replace(b'"kept"', b'"evil"')
    )
    return cases, evil / "evil.json"


@pytest.mark.parametrize(
    "command",
    [
        ["accept", "../../outside/evil"],
        ["accept", "../outside/evil", "--force"],
        ["reject", "../../outside/evil", "--why", "x"],
        ["review", "../../outside/evil"],
        ["cases", "show", "../../outside/evil"],
        ["accept", "/etc/passwd"],
        ["accept", ".hidden"],
    ],
)
def test_an_id_that_is_not_one_is_refused_before_any_path_is_built(outside, command):
    cases, evil = outside
    before = evil.read_bytes()
    line = one_line_error(invoke(*command, "--cases", str(cases), input="a\n"), "is not a case id", "id")
    assert "outside" not in line.split("is not a case id")[1]
    assert evil.read_bytes() == before
    assert not (cases / "evil.json").exists() and sorted(p.name for p in cases.rglob("*.json")) == ["kept.json"]


def test_case_folder_checks_ids_for_every_caller(outside):
    cases, _ = outside
    folder = CaseFolder(cases)
    for call in (folder.find, folder.load, folder.accept, lambda i: folder.reject(i, "no")):
        with pytest.raises(InputError, match="is not a case id"):
            call("../../outside/evil")


def test_save_refuses_an_id_that_skipped_validation(tmp_path):
    escaped = make_case().model_copy(update={"id": "../escaped"})
    with pytest.raises(CaseFileError, match="is not a case id"):
        save_case(escaped, tmp_path / "cases")
    assert not (tmp_path / "escaped.json").exists()


# -- 2. writes never go through a symlink -------------------------------------------------------------
@needs_symlinks
def test_a_symlink_planted_at_the_old_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "cases" / "pending"
    folder.mkdir(parents=True)
    (folder / ".refund.json.tmp").symlink_to(victim)
    path = save_case(make_case(), folder)
    assert victim.read_text() == "precious"
    assert load_case(path).id == "refund" and not path.is_symlink()
    cases = tmp_path / "cases"
    (cases / ".suite.json.tmp").symlink_to(victim)
    bump_suite(cases, name="s")
    assert victim.read_text() == "precious" and (cases / "suite.json").is_file()


@needs_symlinks
def test_a_symlinked_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim.json"
    precious = '{"schema": "harvester.suite/1", "name": "s", "version": "1.0.0", "content_hash": "0"}\n'
    victim.write_text(precious)
    cases = tmp_path / "cases"
    save_case(make_case("a", status="accepted"), cases)
    (cases / "suite.json").symlink_to(victim)
    bump_suite(cases, name="s")
    (cases / "pending").mkdir()
    (cases / "pending" / "b.json").symlink_to(victim)
    save_case(make_case("b"), cases / "pending")
    assert victim.read_text() == precious
    assert not (cases / "suite.json").is_symlink() and not (cases / "pending/b.json").is_symlink()


def test_every_write_creates_a_fresh_name_exclusively(tmp_path, monkeypatch):
    """An exclusive create (O_EXCL, O_NOFOLLOW) of a random name: a name taken meanwhile is an error,
    never a file opened for writing; and no temporary file is left behind."""
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path, flags, *args):
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", spy)
    save_case(make_case(), tmp_path)
    save_case(make_case(), tmp_path)
    names = [Path(p).name for p, _ in opened]
    assert len(names) == 2 and names[0] != names[1] and all(n.startswith(".refund.json.") for n in names)
    for _, flags in opened:
        assert (
            flags & os.O_EXCL
            and flags & os.O_CREAT
            and flags & getattr(os, "O_NOFOLLOW", 0) == getattr(os, "O_NOFOLLOW", 0)
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refund.json"]


def test_a_failed_write_leaves_the_stored_file_and_no_temporary(tmp_path, monkeypatch):
    path = save_case(make_case(), tmp_path)
    before = path.read_bytes()

    def fail(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(Exception, match="No space left"):
        save_case(make_case().model_copy(update={"why": "changed"}), tmp_path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["refund.json"]


def test_a_streamed_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    """``write_file`` of an iterable (``traces export --lines``): parts are written as they come, and an
    error from the iterable (a store that fails midway) leaves what was there and nothing of ours."""
    out = tmp_path / "export.jsonl"
    out.write_bytes(b"before\n")

    def parts():
        yield b"line 1\n"
        raise RuntimeError("the store went away")

    with pytest.raises(RuntimeError, match="went away"):
        _files.write_file(out, parts(), atomic=True)
    assert out.read_bytes() == b"before\n" and [p.name for p in tmp_path.iterdir()] == ["export.jsonl"]
    _files.write_file(out, iter([b"a\n", b"b\n"]), atomic=True)
    assert out.read_bytes() == b"a\nb\n"


@needs_symlinks
def test_a_link_to_this_process_stdout_is_written_in_place_not_replaced(tmp_path, capfd):
    """``--report /dev/stdout`` with output redirected to a file: a rename would replace the link itself
    (as root, /dev/stdout). A link of our own to /proc/self/fd/1 stands in for it."""
    out = tmp_path / "stdout"
    out.symlink_to("/proc/self/fd/1")
    _files.write_file(out, b"to the terminal\n", atomic=True)
    assert out.is_symlink() and "to the terminal" in capfd.readouterr().out


# -- 3. reads: regular files only, and bounded -------------------------------------------------------
@needs_symlinks
def test_a_case_file_linked_to_dev_zero_is_refused_at_once(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "zero.json").symlink_to("/dev/zero")
    with pytest.raises(CaseFileError, match="not a regular file") as err:
        load_cases(cases)
    assert err.value.file and err.value.file.endswith("zero.json")
    one_line_error(invoke("cases", "list", "--cases", str(cases)), "zero.json", "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_case_file_is_refused_instead_of_hanging(tmp_path):
    cases = tmp_path / "cases"
    (cases / "pending").mkdir(parents=True)
    os.mkfifo(cases / "pending" / "stuck.json")
    one_line_error(invoke("cases", "list", "--cases", str(cases)), "stuck.json", "not a regular file")


@needs_symlinks
def test_a_symlink_to_a_regular_case_file_is_read(tmp_path):
    shared = save_case(make_case("shared"), tmp_path / "elsewhere")
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "shared.json").symlink_to(shared)
    assert [c.id for c in load_cases(cases)] == ["shared"]


def test_a_case_file_over_the_configured_limit_is_refused(tmp_path):
    project = tmp_path / "p"
    save_case(make_case(), project / "cases" / "pending")
    (project / "harvester.toml").write_text("max_file_bytes = 100\n")
    one_line_error(invoke("cases", "list", "--config", str(project / "harvester.toml")), "refund.json", "limit of 100")
    one_line_error(invoke("suite", "bump", "--config", str(project / "harvester.toml")), "refund.json", "limit of 100")
    with pytest.raises(CaseFileError, match="over the limit"):
        load_case(project / "cases/pending/refund.json", max_bytes=100)
    assert load_case(project / "cases/pending/refund.json").id == "refund"  # the default limit is generous
    assert load_config(project / "harvester.toml").max_file_bytes == 100
    with pytest.raises(ConfigError, match="max_file_bytes"):
        (project / "harvester.toml").write_text("max_file_bytes = 0\n")
        load_config(project / "harvester.toml")


@needs_symlinks
def test_suite_json_linked_to_dev_zero_is_refused(tmp_path):
    cases = tmp_path / "cases"
    save_case(make_case("a", status="accepted"), cases)
    (cases / "suite.json").symlink_to("/dev/zero")
    one_line_error(invoke("suite", "bump", "--cases", str(cases)), "suite.json", "not a regular file")


# -- 4. a config that is not UTF-8 -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "body"),
    [("harvester.toml", b'cases_dir = "caf\xe9"\n'), ("pyproject.toml", b'[tool.harvester]\ncases_dir = "\xff"\n')],
)
def test_a_config_that_is_not_utf8_is_one_line(tmp_path, monkeypatch, name, body):
    (tmp_path / name).write_bytes(body)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config()
    one_line_error(invoke("cases", "list"), name, "not UTF-8")
    one_line_error(invoke("cases", "list", "--config", str(tmp_path / name)), name, "not UTF-8")


@needs_symlinks
def test_a_config_linked_to_dev_zero_is_one_line(tmp_path):
    (tmp_path / "harvester.toml").symlink_to("/dev/zero")
    one_line_error(invoke("cases", "list", "--config", str(tmp_path / "harvester.toml")), "not a regular file")


# -- 5. the docs say plugins run code ---------------------------------------------------------------
def test_configuration_docs_say_plugins_run_code():
    text = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert "`plugins` runs code" in text and "conftest.py" in text and "every command" in text


# -- 7. the demo counts what it captured, whatever the processor's defaults ---------------------------
@pytest.mark.slow
def test_demo_line_one_counts_every_captured_run_whatever_the_defaults(tmp_path, monkeypatch):
    from harvester.demo import scenario
    from harvester.intake import HarvestingSpanProcessor

    class Stingy(HarvestingSpanProcessor):
        """Defaults a production deployment might choose: sample 0%, flush hourly, huge batches."""

        def __init__(self, store=None, *, sample_rate=0.0, flush_interval_s=3600.0, batch_size=10**6, **kw):
            super().__init__(
                store, sample_rate=sample_rate, flush_interval_s=flush_interval_s, batch_size=batch_size, **kw
            )

    monkeypatch.setattr(scenario, "HarvestingSpanProcessor", Stingy)
    result = scenario.run_demo(tmp_path / "demo", echo=lambda _: None)
    assert result.lines[0].startswith("1. production   6 requests served, 6 runs captured (2 failed)")
