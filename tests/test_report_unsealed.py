"""An unsealed replay (``--no-seal``) says so wherever its report goes: merged from shards, and compared."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.report import CaseResult, Report

WARNING = "replayed without the seal (--no-seal)"


def _shard(path, case: str, shard: str, sealed: bool | None) -> str:
    Report(suite="s", shard=shard, sealed=sealed, results=[CaseResult(id=case, passed=True)]).save(path)
    return str(path)


@pytest.mark.parametrize(("first", "second", "merged"), [(False, True, False), (True, True, True), (True, None, None)])
def test_a_merge_is_unsealed_when_any_shard_was(tmp_path, first, second, merged):
    shards = [_shard(tmp_path / "s1.json", "a", "1/2", first), _shard(tmp_path / "s2.json", "b", "2/2", second)]
    out = [tmp_path / name for name in ("all.json", "all.md", "all.html")]
    result = CliRunner().invoke(
        main, ["merge", *shards, "-o", str(out[0]), "--markdown", str(out[1]), "--html", str(out[2])]
    )
    assert result.exit_code == 0, result.output
    assert Report.load(out[0]).sealed is merged
    said = [WARNING in text for text in (result.output, out[1].read_text(), out[2].read_text())]
    assert said == [merged is False] * 3


def test_compare_says_the_report_was_unsealed(tmp_path):
    base = _shard(tmp_path / "base.json", "a", "1/1", True)
    for sealed in (False, True):
        now = _shard(tmp_path / "now.json", "a", "1/1", sealed)
        result = CliRunner().invoke(main, ["compare", now, "--baseline", base])
        assert result.exit_code == 0 and (WARNING in result.output) is (not sealed), result.output


def test_compare_json_carries_the_warning_a_machine_reads(tmp_path):
    base = _shard(tmp_path / "base.json", "a", "1/1", True)
    for sealed in (False, True):
        now = _shard(tmp_path / "now.json", "a", "1/1", sealed)
        result = CliRunner().invoke(main, ["compare", now, "--baseline", base, "--json"])
        assert result.exit_code == 0, result.output
        said = json.loads(result.output)
        assert said["sealed"] is sealed and said["verdict"] == "release gate: PASS"
        assert [WARNING in w for w in said["warnings"]] == ([True] if not sealed else [])
