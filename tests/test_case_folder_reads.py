"""The case folder read once and lazily: a replay plans small records and reads each case when it runs,
the suite hash comes from that read, and review, cases list and replay validate only the files they
show or run (the rest read for their status and id)."""

from __future__ import annotations

import gc
import inspect
import json
import weakref

import pytest
from click.testing import CliRunner

from harvester import checks
from harvester.canonical import ListDigest, digest
from harvester.case import CaseFolder, load_case, save_case
from harvester.cli import main
from harvester.replay import plan_folder, replay
from harvester.suite import SuiteContent, suite_content, suite_info
from tests.builders.agents import GOOD, case

IDS = ["x", "x-2", "x.y", "y"]  # file-name order ("x-2.json" < "x.json") is not id order


@pytest.fixture()
def folder(tmp_path):
    for i, cid in enumerate(IDS):
        save_case(case(cid, tags=[f"t{i}"]), tmp_path)
    save_case(case("p-1", status="pending"), tmp_path / "pending")
    save_case(case("r-1", status="rejected"), tmp_path / "rejected")
    return CaseFolder(tmp_path)


def invoke(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def broken_pending(folder: CaseFolder, cid: str = "zz-broken") -> None:
    """A pending case whose JSON parses but does not validate (a check nobody registered)."""
    data = case(cid, status="pending").model_dump(mode="json", by_alias=True)
    data["checks"] = [{"check": "vibes"}]
    (folder.root / "pending" / f"{cid}.json").write_text(json.dumps(data))


def test_a_replay_from_a_folder_holds_no_case_it_is_not_running(folder):
    """Each case the walk validated is let go once planned, and read again at its turn."""
    read: list[weakref.ref] = []
    alive_at_first_build: list[int] = []

    def walk():
        for file in folder.each_accepted():
            read.append(weakref.ref(file.case))
            yield file

    def build():
        if not alive_at_first_build:
            gc.collect()
            alive_at_first_build.append(sum(r() is not None for r in read))
        return GOOD

    report = replay(walk(), build, concurrency=1, seal=False)
    assert len(read) == len(IDS) and alive_at_first_build == [0]
    assert [r.id for r in report.results] == IDS and all(r.passed for r in report.results)
    assert [r.tags for r in report.results] == [[f"t{i}"] for i in range(len(IDS))]


def test_a_folder_walk_validates_only_the_status_it_is_asked_for(folder):
    broken_pending(folder)
    assert [f.case.id for f in folder.each_accepted()] == IDS
    assert [f.case.id for f in folder.each("rejected")] == ["r-1"]
    with pytest.raises(Exception, match="zz-broken.json.*unknown check 'vibes'"):
        list(folder.each("pending"))
    assert folder.ids_with("pending") == ["p-1", "zz-broken"]


def test_a_duplicate_id_across_statuses_is_still_refused(folder):
    save_case(case("x", status="pending"), folder.root / "pending")
    with pytest.raises(Exception, match="duplicate id 'x'"):
        list(folder.each_accepted())


def test_the_suite_hash_from_the_replay_read_is_the_folder_hash(folder):
    read = plan_folder(folder.each_accepted(), False, None, sources=True)
    assert [e.id for e in read.planned] == IDS and all(e.held is None for e in read.planned)
    assert set(read.sources) == set(IDS) and read.held == []  # no case names a judge
    accepted = sorted((load_case(folder.root / f"{cid}.json") for cid in IDS), key=lambda c: c.id)
    formula = digest([c.model_dump(mode="json", by_alias=True, exclude_defaults=True) for c in accepted], length=64)
    assert read.content.result() == (formula, len(IDS)) == suite_content(folder.root)
    assert suite_info(folder.root, read.content.result()) == suite_info(folder.root)


def test_suite_content_refuses_cases_out_of_id_order(folder):
    content = SuiteContent()
    content.add(load_case(folder.root / "y.json"))
    with pytest.raises(ValueError, match="id order"):
        content.add(load_case(folder.root / "x.json"))


def test_a_list_digest_fed_item_by_item_is_the_digest_of_the_list():
    items = [{"b": 1.0, "a": ["é", None, True]}, "x", 3, {"nested": {"deep": [1.5, {"k": "v"}]}}]
    fed = ListDigest()
    for item in items:
        fed.add(item)
    assert fed.hexdigest(64) == digest(items, length=64) and ListDigest().hexdigest() == digest([])
    odd = ListDigest()  # an int orjson refuses: only the whole list's slower encoding is the digest
    odd.add({"n": 2**70})
    assert odd.hexdigest() is None and digest([{"n": 2**70}])


def test_review_cases_list_and_replay_read_a_broken_pending_case_only_to_show_it(folder, tmp_path, monkeypatch):
    broken_pending(folder)
    root = str(folder.root)
    shown = invoke("review", "--cases", root, input="q\n")  # p-1 first; zz-broken never shown
    assert shown.exit_code == 0 and "p-1" in shown.output
    listed = invoke("cases", "list", "--cases", root, "--status", "accepted", "--json")
    assert listed.exit_code == 0 and [c["id"] for c in json.loads(listed.output)] == IDS
    assert invoke("cases", "list", "--cases", root).exit_code == 2  # shown, so validated: named
    (tmp_path / "folder_reads_agent.py").write_text("from tests.builders.agents import good as build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ran = invoke("replay", "--cases", root, "--agent", "folder_reads_agent:build", "--report", str(tmp_path / "r.json"))
    assert ran.exit_code == 0, ran.output
    assert [r["id"] for r in json.loads((tmp_path / "r.json").read_text())["results"]] == IDS


def test_a_check_factory_signature_is_worked_out_once(monkeypatch):
    asked: list[object] = []
    real = inspect.signature

    def counting(obj, *args, **kwargs):
        asked.append(obj)
        return real(obj, *args, **kwargs)

    def once_only(*tools: str):
        return lambda run: (True, "ok")

    monkeypatch.setitem(checks.REGISTRY, "once_only", once_only)
    monkeypatch.setattr(inspect, "signature", counting)
    for _ in range(5):
        checks.from_spec({"check": "once_only", "tools": ["a", "b"]})
    assert asked.count(once_only) == 1
