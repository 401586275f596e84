"""Configuration: discovery, validation with the file and key named, prices."""

from __future__ import annotations

import pytest

from harvester.config import Config, load_config
from harvester.errors import ConfigError
from harvester.model import Usage

FULL = """
[tool.harvester]
mutating_tools = ["issue_refund", "delete_*"]
cases_dir = "golden"
store = "data/traces.db"
gates = ["task_completion>=0.85"]

[tool.harvester.ignore_args]
kb_search = ["request_id"]

[tool.harvester.prices."gpt-4.1-mini"]
input = 0.4
output = 1.6

[tool.harvester.redact]
patterns = ['\\d{16}']
fields = { get_customer = ["result.email"] }
"""


def test_pyproject_table_found_from_a_subfolder_and_paths_resolved(tmp_path):
    (tmp_path / "pyproject.toml").write_text(FULL)
    sub = tmp_path / "src" / "app"
    sub.mkdir(parents=True)
    cfg = load_config(start=sub)
    assert cfg.source == str(tmp_path / "pyproject.toml")
    assert cfg.ignore_args == {"kb_search": ["request_id"]}
    assert cfg.cases_dir == str(tmp_path.resolve() / "golden")
    assert cfg.store == str(tmp_path.resolve() / "data/traces.db")
    assert cfg.redact.fields == {"get_customer": ["result.email"]}
    assert cfg.gates == ["task_completion>=0.85"]


def test_harvester_toml_wins_over_pyproject_in_the_same_folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text(FULL)
    (tmp_path / "harvester.toml").write_text('mutating_tools = ["wire_money"]\n')
    assert load_config(start=tmp_path).mutating_tools == ["wire_money"]


def test_a_pyproject_without_the_table_stops_the_search(tmp_path):
    (tmp_path / "harvester.toml").write_text('mutating_tools = ["wire_money"]\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    cfg = load_config(start=inner)
    assert cfg.mutating_tools == [] and cfg.source == str(inner / "pyproject.toml")


def test_explicit_path(tmp_path):
    path = tmp_path / "custom.toml"
    path.write_text('mutating_tools = ["a"]\n')
    assert load_config(path).mutating_tools == ["a"]
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_unknown_key_names_file_and_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.harvester]\nmutating_tool = ["x"]\n')
    with pytest.raises(ConfigError) as err:
        load_config(start=tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "pyproject.toml") in msg
    assert "tool.harvester.mutating_tool" in msg and "unknown key 'mutating_tool'" in msg


def test_unknown_nested_key_and_bad_types(tmp_path):
    path = tmp_path / "harvester.toml"
    path.write_text("[redact]\nenable = false\n")
    with pytest.raises(ConfigError, match=r"redact\.enable: unknown key 'enable'"):
        load_config(path)
    path.write_text('[prices.m]\ninput = "cheap"\noutput = 1\n')
    with pytest.raises(ConfigError, match=r"prices\.m\.input"):
        load_config(path)
    path.write_text("[redact]\npatterns = ['(unclosed']\n")
    with pytest.raises(ConfigError, match="not a valid regex"):
        load_config(path)
    path.write_text("[redact.fields]\nget_customer = ['email']\n")
    with pytest.raises(ConfigError, match=r"redact\.fields: .*must start with args\. or result\."):
        load_config(path)
    path.write_text("[redact.patterns]\naccount = 'ACC-\\d+'\n")
    assert load_config(path).redact.patterns == {"account": "ACC-\\d+"}


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "harvester.toml"
    path.write_text("mutating_tools = [\n")
    with pytest.raises(ConfigError, match="invalid TOML") as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_mutating_globs_and_cost():
    cfg = Config(
        mutating_tools=["issue_refund", "delete_*"],
        prices={"gpt-4.1": {"input": 2.0, "output": 8.0}, "gpt-4.1-mini": {"input": 0.4, "output": 1.6}},
    )
    assert cfg.is_mutating("delete_user") and cfg.is_mutating("issue_refund")
    assert not cfg.is_mutating("kb_search")
    assert cfg.cost("gpt-4.1-mini", Usage(input_tokens=1000, output_tokens=500)) == pytest.approx(0.4 + 0.8)
    # longest matching prefix: a dated snapshot is priced like its family
    assert cfg.cost("gpt-4.1-mini-2025-04-14", {"input_tokens": 2000, "output_tokens": 0}) == pytest.approx(0.8)
    assert cfg.cost("gpt-4.1-mini", {"input_tokens": 2000}) is None  # an unknown count is not 0
    assert cfg.cost("claude", Usage()) is None and cfg.cost(None, Usage()) is None


def test_no_config_anywhere_gives_defaults(tmp_path):
    cfg = load_config(start=tmp_path)
    assert cfg == Config(cases_dir=cfg.cases_dir) and cfg.mutating_tools == []


def test_a_field_is_named_as_the_file_it_came_from_spells_it(tmp_path):
    """A bad value found after loading (a gate, a sandbox entry, calibration.require) is named as the
    user wrote it: under [tool.harvester] in a pyproject.toml, top-level in a harvester.toml."""
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "pyproject.toml").write_text('[tool.harvester]\ngates = ["task_completion>=0.5"]\n')
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "harvester.toml").write_text('gates = ["task_completion>=0.5"]\n')
    assert load_config(start=tmp_path / "py").field("calibration.require") == "tool.harvester.calibration.require"
    assert load_config(start=tmp_path / "own").field("calibration.require") == "calibration.require"
    assert Config().field("gates") == "gates"
