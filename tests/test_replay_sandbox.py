"""The sandbox tier (``replay --sandbox``): the tools ``[sandbox]`` names run for real against a sandbox
service on 127.0.0.1, every other tool stays recorded, the seal allows the sandbox's hosts and nothing
more, and the report compares what the sandbox answered with what production answered, path by path.
Without ``--sandbox`` nothing changes."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harvester.case import AgentCase
from harvester.config import Config
from harvester.fixtures import FixtureTools
from harvester.replay import Sandbox, sandbox_for
from harvester.replay._sandbox import SandboxTools
from harvester.report import CaseResult, Report, SandboxCall, merge
from tests.apps import mcp_app, sandbox_app, shop
from tests.builders import project as user
from tests.builders.backends import Loopback, loopback, routes
from tests.builders.capture import capturing_globally
from tests.builders.cli import one_line_error
from tests.builders.installed import APPS as FRAMEWORK_APPS
from tests.builders.installed import require_app

cli = user.cli
TARGET = "tests.apps.sandbox_app:build"
PRODUCTION_ORDER = {"order_id": "A1001", "status": "delivered", "total": 40}
SANDBOX_ORDER = {"order_id": "A1001", "status": "shipped", "total": 40}


@pytest.fixture
def services() -> Iterator[dict[str, Loopback]]:
    """Production's orders and inventory services, and the sandbox's orders service."""
    with (
        loopback(routes({"/orders/A1001": PRODUCTION_ORDER})) as orders,
        loopback(routes({"/stock/SKU-1": {"sku": "SKU-1", "count": 3}})) as inventory,
        loopback(routes({"/orders/A1001": SANDBOX_ORDER})) as sandbox,
    ):
        yield {"orders": orders, "inventory": inventory, "sandbox": sandbox}


def config(sandbox: Loopback, *, tools: str = '["get_order"]', env: bool = True) -> str:
    lines = [user.CONFIG, "[sandbox]", f"tools = {tools}", f'hosts = ["127.0.0.1:{sandbox.port}"]']
    if env:
        lines.append(f'env = {{ {sandbox_app.ORDERS_ENV} = "{sandbox.origin}" }}')
    return "\n".join(lines) + "\n"


@pytest.fixture
def project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, services: dict[str, Loopback]
) -> Iterator[tuple[Path, dict[str, Loopback]]]:
    """A project whose one accepted case is a production run against production's services."""
    root = user.enter_project(tmp_path, monkeypatch, config=config(services["sandbox"]))
    monkeypatch.setenv(sandbox_app.ORDERS_ENV, services["orders"].origin)
    monkeypatch.setenv(sandbox_app.INVENTORY_ENV, services["inventory"].origin)
    run = user.capture_production(sandbox_app, root / "traces.db")
    assert run.trajectory() == ["get_order", "check_stock"], run.calls
    user.accept_incident(run.trace_id, "the order status comes from the orders service")
    for service in services.values():
        service.seen.clear()
    yield root, services


def replay(*options: str) -> tuple[int, str, Report]:
    out = cli("replay", "--agent", TARGET, "--report", "r.json", "--html", "r.html", "--markdown", "r.md", *options)
    return out.exit_code, out.output, Report.load("r.json")


def test_the_sandboxed_tool_runs_against_the_sandbox_and_every_other_tool_stays_recorded(project):
    root, services = project
    code, output, report = replay("--sandbox")
    (r,) = report.results
    assert code == 0 and r.passed, (output, r.reasons())
    # get_order ran for real, pointed at the sandbox by the config's env; check_stock was served
    assert [s.path for s in services["sandbox"].seen] == ["/orders/A1001"]
    assert services["orders"].seen == [] and services["inventory"].seen == []
    assert os.environ[sandbox_app.ORDERS_ENV] == services["orders"].origin  # the env is restored after
    assert r.live_calls == 0 and not [c for c in r.checks if c.name in ("live_tool_call", "sealed")]
    assert r.trajectory == ["get_order", "check_stock"] and r.no_fixture == 0
    (call,) = r.sandboxed
    assert call.tool == "get_order" and call.differs == [".status"] and call.recorded and call.traced
    assert report.sandbox == ["get_order"]
    line = "sandbox: ran for real get_order (1 call, 1 differs from production); every other tool served from fixtures"
    assert report.sandbox_line() == line
    assert line in output
    assert "sandbox get_order differs from production at .status" in output
    html = (root / "r.html").read_text()
    said = 'get_order({"order_id":"A1001"}): the sandbox differs from production at .status'
    assert f"<ul class=sandbox><li class=warn><code>{said}</code>" in html and line in html
    markdown = (root / "r.md").read_text()
    assert line in markdown and "sandbox get_order differs from production at .status" in markdown, markdown


def test_without_sandbox_nothing_changes(project):
    _, services = project
    code, output, report = replay()
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert all(s.seen == [] for s in services.values())  # every tool served, the sandbox untouched
    assert report.sandbox is None and r.sandboxed == [] and report.sandbox_line() is None
    assert "sandbox" not in output


def test_a_service_outside_the_sandbox_is_refused_by_the_seal(project):
    """The sandbox's order names a SKU, so the real ``get_order`` body reaches for the inventory
    service (``check_stock``'s, which is not sandboxed): the seal refuses it and the case fails."""
    _, services = project
    services["sandbox"].handle = routes({"/orders/A1001": {**SANDBOX_ORDER, "sku": "SKU-1"}})
    code, _, report = replay("--sandbox")
    (r,) = report.results
    assert code == 1 and not r.passed
    assert [s.path for s in services["sandbox"].seen] == ["/orders/A1001"]
    assert services["inventory"].seen == []
    sealed = next(c for c in r.checks if c.name == "sealed")
    assert f"connect to 127.0.0.1:{services['inventory'].port} during get_order" in sealed.detail


def test_a_sandboxed_tool_not_pointed_at_the_sandbox_cannot_reach_production(project):
    root, services = project
    (root / "harvester.toml").write_text(config(services["sandbox"], env=False))
    code, _, report = replay("--sandbox")
    (r,) = report.results
    assert code == 1 and not r.passed
    assert all(s.seen == [] for s in services.values())
    sealed = next(c for c in r.checks if c.name == "sealed")
    assert f"connect to 127.0.0.1:{services['orders'].port} during get_order" in sealed.detail


def test_an_entry_naming_no_known_tool_warns_with_the_closest_names(project):
    root, services = project
    (root / "harvester.toml").write_text(config(services["sandbox"], tools='["get_ordr"]'))
    out = cli("replay", "--agent", TARGET, "--sandbox")
    assert out.exit_code == 0, out.output
    assert "warning: sandbox.tools: 'get_ordr' matches no tool the cases know (closest: get_order)" in out.output
    assert services["sandbox"].seen == []  # nothing matched: every tool served
    assert "sandbox (get_ordr): no tool ran for real; every tool served from fixtures" in out.output


@pytest.mark.parametrize(
    ("tools", "field", "says"),
    [
        ('["*_refund"]', "sandbox.tools", "'*_refund' would match the mutating tool 'issue_refund'"),
        ("[]", "sandbox.tools", "--sandbox needs tools to run for real"),
        ('"get_order"', "sandbox.tools", "list"),
    ],
)
def test_bad_sandbox_config_is_one_line_naming_the_field(project, tools, field, says):
    root, services = project
    (root / "harvester.toml").write_text(config(services["sandbox"], tools=tools))
    out = cli("replay", "--agent", TARGET, "--sandbox")
    line = one_line_error(out)
    assert "harvester.toml" in line and field in line and says in line, line
    assert all(s.seen == [] for s in services.values())


def test_a_bad_sandbox_host_names_the_field(tmp_path):
    (tmp_path / "harvester.toml").write_text('[sandbox]\ntools = ["kb_search"]\nhosts = ["not a host"]\n')
    out = cli("cases", "list", "--config", str(tmp_path / "harvester.toml"))
    line = one_line_error(out)
    assert "sandbox.hosts" in line and "'not a host' is not a host" in line, line


def test_a_glob_never_matches_a_mutating_tool_and_a_full_name_does():
    sandbox = Sandbox(("get_*", "*_stock", "cancel_order"), mutating_tools=("issue_*", "cancel_order"))
    assert sandbox.runs("get_order") and sandbox.runs("check_stock")
    assert not sandbox.runs("issue_refund") and not sandbox.runs("kb_search")
    assert sandbox.runs("cancel_order")  # mutating, and named in full
    assert not sandbox.runs("get_refund", forbidden=["get_refund"])  # the case forbids it: mutating here
    case = AgentCase.model_validate({"id": "c", "prompt": "p", "forbidden_tools": ["get_refund"]})
    tools = SandboxTools(case, sandbox)
    assert tools.sandboxed("get_order", {"id": 1}) and not tools.sandboxed("get_refund", {})
    assert [(e.name, e.outcome, e.reason) for e in tools.log] == [("get_order", "sandbox", "unknown_tool")]
    assert tools.no_fixture == 0  # ran for real: not a call the recording failed to answer
    assert not hasattr(FixtureTools(case), "sandboxed")  # without --sandbox, no tool runs for real
    broken = AgentCase.model_validate({"id": "v", "prompt": "p", "inject_failures": {"get_order": {"mode": "timeout"}}})
    assert not SandboxTools(broken, sandbox).sandboxed("get_order", {})  # a recovery variant breaks it on purpose


def test_sandbox_for_reads_the_cases_forbidden_tools_as_mutating():
    case = AgentCase.model_validate({"id": "c", "prompt": "p", "forbidden_tools": ["wipe_cache"]})
    config = Config.model_validate({"sandbox": {"tools": ["wipe_*"]}})
    with pytest.raises(Exception, match="'wipe_\\*' would match the mutating tool 'wipe_cache'"):
        sandbox_for(config, [case])
    named = Config.model_validate({"sandbox": {"tools": ["wipe_cache"]}})
    sandbox, warnings = sandbox_for(named, [case])
    assert sandbox.runs("wipe_cache", ["wipe_cache"]) and warnings == []


# every registered adapter's app (tests/apps/<adapter>_app.py) and an own loop of ``@harvester.tool``s,
# over the shop whose tools count their real runs
APPS = (*FRAMEWORK_APPS, "own_loop_app")


def _accepted_with_kb_search_sandboxed(app_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A project whose ``[sandbox]`` names ``kb_search``, holding the accepted case of one production
    request to the app."""
    require_app(app_name)
    app = importlib.import_module(f"tests.apps.{app_name}")
    root = user.enter_project(tmp_path, monkeypatch, config=user.CONFIG + '[sandbox]\ntools = ["kb_search"]\n')
    run = user.capture_production(app, root / "traces.db")
    user.accept_incident(run.trace_id, "the answer comes from the policy")


@pytest.mark.parametrize("app_name", APPS)
def test_every_framework_runs_a_sandbox_tool_for_real_and_serves_the_rest(app_name, tmp_path, monkeypatch):
    """Each framework's tool dispatch lets the sandbox tool's own body run (the shop counts it) and
    serves the others; the call pairs with its tool span, so it is no live call, and it answers as
    production did."""
    _accepted_with_kb_search_sandboxed(app_name, tmp_path, monkeypatch)
    shop.LIVE.clear()
    code, report = user.replay(f"tests.apps.{app_name}:build", "baseline", monkeypatch, "r.json", "--sandbox")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert dict(shop.LIVE) == {"kb_search": 1}
    assert r.live_calls == 0 and r.trajectory == ["kb_search", "get_order"]
    assert [(c.tool, c.traced, c.differs) for c in r.sandboxed] == [("kb_search", True, [])]


@pytest.mark.parametrize("app_name", APPS)
def test_a_refusal_in_a_sandbox_tool_names_the_tool_in_every_framework(app_name, tmp_path, monkeypatch):
    """A sandbox tool's body that posts where the seal refuses: the refusal names the tool, also where the
    framework's tracer never makes its tool span current (LangChain's)."""
    _accepted_with_kb_search_sandboxed(app_name, tmp_path, monkeypatch)
    with loopback(routes({"/audit": {"ok": True}})) as audit:
        monkeypatch.setenv(shop.LEAK_ENV, f"{audit.origin}/audit")
        _, report = user.replay(f"tests.apps.{app_name}:build", "baseline", monkeypatch, "r.json", "--sandbox")
        assert audit.seen == []
    (r,) = report.results
    (sealed,) = [c.detail for c in r.checks if c.name == "sealed"]
    assert f"refused connect to 127.0.0.1:{audit.port} during kb_search:" in (sealed or "")


@pytest.mark.slow
def test_an_mcp_servers_tools_stay_served_under_sandbox(tmp_path, monkeypatch):
    """An MCP server is never started in a replay: a sandbox entry naming its tool serves it from fixtures."""
    monkeypatch.setenv(mcp_app.LOG_ENV, str(tmp_path / "server.log"))
    config = user.CONFIG + '[sandbox]\ntools = ["kb_search"]\n'
    root = user.enter_project(tmp_path, monkeypatch, config=config)
    with capturing_globally(str(root / "traces.db")):
        mcp_app.serve()
    (root / "server.log").unlink()
    user.harvest_and_accept(root)
    code, report = user.replay("tests.apps.mcp_app:build", "baseline", monkeypatch, "r.json", "--sandbox")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert r.sandboxed == [] and r.live_calls == 0 and r.trajectory == ["kb_search", "get_order"]
    assert not (root / "server.log").exists(), "the replay started the MCP server"


def test_merged_shards_keep_what_ran_in_the_sandbox():
    def shard(i: int, differs: list[str]) -> Report:
        call = SandboxCall(tool="get_order", args='{"order_id":"A1"}', differs=differs)
        return Report(
            shard=f"{i}/2", sandbox=["get_order"], results=[CaseResult(id=f"c{i}", passed=True, sandboxed=[call])]
        )

    merged = merge([shard(1, [".status"]), shard(2, [])])
    assert merged.sandbox == ["get_order"]
    assert merged.sandbox_line() == (
        "sandbox: ran for real get_order (2 calls, 1 differs from production); every other tool served from fixtures"
    )
    assert Report.from_data(orjson.loads(merged.to_json())).results[0].sandboxed[0].differs == [".status"]


def test_shadow_sandbox_runs_the_named_tool_for_real_on_production_runs(tmp_path, monkeypatch, services):
    """``shadow --sandbox`` takes replay's sandbox: a stored production run (no case) replays with
    ``get_order`` against the sandbox, ``check_stock`` from the run's recording, and the summary names
    what ran for real."""
    root = user.enter_project(tmp_path, monkeypatch, config=config(services["sandbox"]))
    monkeypatch.setenv(sandbox_app.ORDERS_ENV, services["orders"].origin)
    monkeypatch.setenv(sandbox_app.INVENTORY_ENV, services["inventory"].origin)
    user.capture_production(sandbox_app, root / "traces.db")
    for service in services.values():
        service.seen.clear()
    out = cli("shadow", "--agent", TARGET, "--sandbox", "--report", "s.json")
    assert out.exit_code == 0, out.output
    assert [s.path for s in services["sandbox"].seen] == ["/orders/A1001"]
    assert services["orders"].seen == [] and services["inventory"].seen == []
    assert "sandbox ran for real: get_order (1)" in out.output
    assert orjson.loads((root / "s.json").read_bytes())["sandbox"] == {"get_order": 1}
    # without --sandbox the same shadow serves every tool from the recording
    out = cli("shadow", "--agent", TARGET)
    assert out.exit_code == 0 and "sandbox ran for real" not in out.output
    assert [s.path for s in services["sandbox"].seen] == ["/orders/A1001"]
