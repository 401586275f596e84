"""Triage (issue 35 item 1) and harvest by cluster (item 2): a store of a few thousand runs with known
failure families is ranked as exactly those clusters, the new one first, and each becomes one case."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from harvester.case import CaseFolder, load_case
from harvester.cli import main
from harvester.harvest import cluster_key, failure_kind, harvest_clusters, mask, triage
from harvester.model import ErrorInfo
from harvester.store import TraceStore
from tests.builders.cli import one_line_error
from tests.builders.failures import FAMILIES, NEW_FAMILY, traffic
from tests.builders.runs import call, run

RUNS = 3000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("triage") / "traces.db"
    s = TraceStore(path)
    s.add_many(traffic(RUNS, now=time.time()))
    yield s
    s.close()


def _families(found):
    """Cluster id -> the family of its example run (read back from the builder's error texts)."""
    marks = {"orders-db": "orders_timeout", "may not refund": "refund_denied", "index": "kb_down", "parse": NEW_FAMILY}
    return {c.id: next(f for m, f in marks.items() if m in c.key.summary()) for c in found.clusters}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# -- the signature ----------------------------------------------------------------------------------
def test_mask_hides_what_varies_between_occurrences():
    assert mask("orders-db timeout after 1200ms for order A1001") == "orders-db timeout after <id> for order <id>"
    assert mask("user 'u77' id 3f9a0c1d-1234-4abc-8def-0123456789ab took 1.5 s") == "user <str> id <uuid> took <n> s"
    assert mask('can\'t parse "12.50"') == "can't parse <str>"  # an apostrophe is not a quote


def test_same_error_with_other_ids_is_one_cluster_another_tool_is_another():
    def failing(order, tool="get_order"):
        err = ErrorInfo(type="timeout", message=f"orders-db timeout for order {order} after {len(order)}0ms")
        return run(call("kb_search"), call(tool, "error", error=err), prompt=f"Where is order {order}?")

    a, b, c = failing("A1001"), failing("B77"), failing("A1001", tool="get_invoice")
    key = [cluster_key(r, failure_kind(r)) for r in (a, b, c)]
    assert key[0] == key[1] and key[0] != key[2]
    assert key[0].path == ("kb_search", "get_order") and key[0].tool == "get_order"
    looped = run(*[call("kb_search")] * 5, stop="loop_detected")
    assert cluster_key(looped, failure_kind(looped)).path == ("kb_search",)  # a loop of any length is one path


# -- triage ----------------------------------------------------------------------------------------------
def test_triage_finds_exactly_the_injected_families_and_flags_the_new_one(store, tmp_path):
    found = triage(store, tmp_path / "cases", since="7d")
    families = _families(found)
    assert sorted(families.values()) == sorted(FAMILIES)  # one cluster per family, deferred runs left out
    first = found.clusters[0]
    assert families[first.id] == NEW_FAMILY and first.trend == "new" and first.previous == 0
    assert all(c.trend != "new" and c.previous > 0 for c in found.clusters[1:])
    assert found.runs == sum(c.size for c in found.clusters) and found.previous_runs > 0
    assert all(c.example is not None and c.covered == {} for c in found.clusters)


def test_triage_is_deterministic_and_streams_failing_runs_only(store, tmp_path):
    end = time.time()
    one = triage(store, tmp_path, since=end - 7 * 86400, until=end)
    two = triage(store, tmp_path, since=end - 7 * 86400, until=end)
    assert one.to_dict() == two.to_dict()
    calls = []

    class Spy:
        def runs(self, **kw):
            calls.append(kw)
            return store.runs(**kw)

    triage(Spy(), tmp_path, since="7d")
    assert calls[0]["failed"] is True and calls[0]["since"] < time.time() - 13.9 * 86400  # two windows


def test_similar_merges_near_duplicate_error_texts_only(tmp_path):
    s = TraceStore(tmp_path / "t.db")
    texts = ["orders-db timeout while reading the orders table on replica east"] * 3
    texts += ["orders-db timeout while reading the orders table on replica west"] * 2  # 9 of 11 words alike
    texts += ["orders-db refused the connection"]  # the same tool, another failure
    for i, (text, tool) in enumerate([(t, "get_order") for t in texts] + [(texts[0], "get_invoice")]):
        failing = run(call(tool, "error", error=ErrorInfo(type="timeout", message=text)), trace=f"{i:032x}")
        s.add(failing.model_copy(update={"started_at": f"2026-12-01T0{i}:00:00Z"}))
    window = {"since": "2026-11-30T00:00:00Z", "until": "2026-12-02T00:00:00Z"}
    plain = triage(s, tmp_path, **window)
    merged = triage(s, tmp_path, **window, merge_similar=True)
    assert sorted(c.size for c in plain.clusters) == [1, 1, 2, 3]
    assert sorted(c.size for c in merged.clusters) == [1, 1, 5]  # east + west; another tool or text stays apart
    big = max(merged.clusters, key=lambda c: c.size)
    assert len(big.merged) == 1 and merged.find(big.merged[0]) is big
    s.close()


# -- harvest --by-cluster ----------------------------------------------------------------------------------
def test_harvest_by_cluster_proposes_one_case_per_cluster_then_none(store, tmp_path):
    cases = tmp_path / "cases"
    result = harvest_clusters(store, cases, since="7d")
    assert len(result.proposed) == len(FAMILIES) and sorted(result.proposed.values()) == sorted(
        c.id for c in triage(store, cases, since="7d").clusters
    )
    for case_id, cluster in result.proposed.items():
        case = load_case(cases / "pending" / f"{case_id}.json")
        assert case.source.cluster == cluster and case.source.seen > 1
        [note] = [n for n in case.review_notes if f"cluster {cluster}" in n]
        assert "failing runs from" in note and "signature:" in note
    again = harvest_clusters(store, cases, since="7d")
    assert again.proposed == {} and len(again.waiting) == len(FAMILIES)
    # accepted: not proposed again, and it says how many runs that case now covers
    case_id, cluster = next(iter(result.proposed.items()))
    CaseFolder(cases).accept(case_id, force=True)
    after = harvest_clusters(store, cases, since="7d")
    size = triage(store, cases, since="7d").find(cluster).size
    assert after.proposed == {} and after.covers == {case_id: size} and after.accepted == [cluster]
    assert f"  {case_id} now covers {size} runs" in after.lines()


def test_a_plain_harvested_case_covers_its_cluster_in_triage(store, tmp_path):
    from harvester.harvest import harvest

    cases = tmp_path / "cases"
    harvest(store, cases, failed_only=True, limit=50)
    found = triage(store, cases, since="7d")
    assert any(c.covered for c in found.clusters)
    assert all(status == "pending" for c in found.clusters for status in c.covered.values())


# -- the commands ---------------------------------------------------------------------------------------
def test_triage_command_lists_ranked_clusters_and_json(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("triage", "--store", store.path, "--cases", str(tmp_path / "cases"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{len(FAMILIES)} clusters of ") and lines[1].split()[:4] == [
        "CLUSTER",
        "RUNS",
        "PREV",
        "TREND",
    ]
    assert lines[2].split()[3] == "new" and "could not parse" in lines[2]
    assert "harvest --by-cluster" in lines[-1]
    data = json.loads(invoke("triage", "--json", "--store", store.path, "--cases", str(tmp_path / "c")).output)
    assert [c["trend"] for c in data["clusters"]][0] == "new" and len(data["clusters"]) == len(FAMILIES)
    one = invoke("triage", "--cluster", data["clusters"][1]["id"], "--store", store.path, "--cases", str(tmp_path))
    assert one.exit_code == 0 and data["clusters"][1]["example"]["trace_id"] in one.output


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--since", "last tuesday"], ["since", "cannot read time"]),
        (["--since", "2099-01-01"], ["since", "not before the end"]),
        (["--cluster", "c00000000"], ["no cluster 'c00000000'"]),
    ],
)
def test_triage_bad_input_is_one_line(store, tmp_path, args, needles):
    one_line_error(invoke("triage", *args, "--store", store.path, "--cases", str(tmp_path)), *needles)


def test_harvest_by_cluster_command(store, tmp_path):
    cases = str(tmp_path / "cases")
    result = invoke("harvest", "--by-cluster", "--since", "7d", "--store", store.path, "--cases", cases)
    assert result.exit_code == 0 and result.output.startswith(f"{len(FAMILIES)} clusters: {len(FAMILIES)} new cases")
    one_line_error(
        invoke("harvest", "--by-cluster", "--limit", "5", "--store", store.path, "--cases", cases), "--limit"
    )


def test_triage_reads_both_engines_alike(store_url, tmp_path):
    """The store is streamed through its ``failed`` index on SQLite and PostgreSQL alike."""
    with TraceStore(store_url) as s:
        s.add_many(traffic(600, seed=3, now=time.time()))
        found = triage(s, tmp_path, since="7d")
    assert sorted(_families(found).values()) == sorted(FAMILIES)
    assert found.clusters[0].trend == "new" and _families(found)[found.clusters[0].id] == NEW_FAMILY
