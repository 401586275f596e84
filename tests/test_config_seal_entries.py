"""``[tool.harvester.replay]`` entries the seal reads: what is a host, a command, a floor, and how an
international name is kept (its IDNA form, which is what clients look up and the seal compares)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.config import load_config
from harvester.errors import ConfigError
from harvester.replay._policy import Policy
from tests.builders.cli import one_line_error

LONG_NAME = ("a" * 60 + ".") * 5 + "com"


def _config(tmp_path, line: str):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.harvester.replay]\n{line}\n", encoding="utf-8")
    return load_config(start=tmp_path), path


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("1234", "must be an IPv4 address"),
        ("0", "must be an IPv4 address"),
        ("1.2.3", "must be an IPv4 address"),
        ("1.2.3.400", "must be an IPv4 address"),
        ("999.1.1.1:80", "must be an IPv4 address"),
        (LONG_NAME, "at most 253 characters"),
        ("a" * 64 + ".com", "is not a host or host:port"),
    ],
)
def test_an_entry_that_is_no_host_is_refused_naming_file_and_field(tmp_path, entry, why):
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, f'allow_hosts = ["{entry}"]')
    line = str(err.value)
    assert "pyproject.toml" in line and "tool.harvester.replay.allow_hosts" in line and why in line, line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("entry", "kept"),
    [
        ("hóst.example.com", "xn--hst-gna.example.com"),
        ("例え.jp:443", "xn--r8jz45g.jp:443"),
        ("*.hóst.example.com", "*.xn--hst-gna.example.com"),
        ("xn--r8jz45g.jp", "xn--r8jz45g.jp"),
        ("[fe80::1%eth0]:80", "[fe80::1%eth0]:80"),
        ("fe80::1%eth0", "fe80::1%eth0"),
        ("10.0.0.5:8080", "10.0.0.5:8080"),
    ],
)
def test_an_international_name_is_kept_in_its_idna_form_and_a_zone_in_brackets(tmp_path, entry, kept):
    config, _ = _config(tmp_path, f'allow_hosts = ["{entry}"]')
    assert config.replay.allow_hosts == [kept]


def test_the_seal_allows_an_international_name_however_it_is_looked_up():
    policy = Policy(["hóst.example.com", "例え.jp:443"])
    assert policy.allows_host("xn--hst-gna.example.com", 443) and policy.allows_host("hóst.example.com", 443)
    assert policy.allows_host("例え.jp", 443) and policy.allows_host("xn--r8jz45g.jp", 443)
    assert not policy.allows_host("host.example.com", 443) and not policy.allows_host("xn--r8jz45g.jp", 80)


@pytest.mark.parametrize(
    ("line", "field", "why"),
    [
        ("min_task_completion = true", "min_task_completion", "valid number"),
        ('min_task_completion = "0.5"', "min_task_completion", "valid number"),
        ('allow_commands = ["python\\u0000"]', "allow_commands", "holds a control character (U+0000)"),
        ('allow_commands = ["python -m\\u001bx"]', "allow_commands", "holds a control character (U+001B)"),
    ],
)
def test_a_floor_that_is_no_number_and_a_command_with_a_control_character_are_refused(tmp_path, line, field, why):
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, line)
    message = str(err.value)
    assert f"tool.harvester.replay.{field}" in message and why in message and "\n" not in message, message


def test_a_whole_number_floor_is_a_number(tmp_path):
    assert _config(tmp_path, "min_task_completion = 1")[0].replay.min_task_completion == 1.0


@pytest.mark.parametrize("host", ["https://api.example.com", "1.2.3.400", "a b", "host:0", "[::1"])
def test_a_bad_allow_host_option_is_one_error_line_naming_the_option(monkeypatch, tmp_path, host):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["replay", "--agent", "tests.apps.leaky_app:build", f"--allow-host={host}"])
    one_line_error(result, "--allow-host: ", repr(host))
