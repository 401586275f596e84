"""Imports that end: a backend paging forever (a new cursor every page, or one it gave before), a pull
past its deadline, an answer over the byte cap, and one whose JSON would expand in memory each end
``import`` and ``incident --from`` with one line naming the backend, exit 2, nothing stored."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.intake.backends._limits import json_values
from tests.builders.backends import loopback, reply
from tests.builders.cli import one_line_error

TID = "ab" * 16
_EXPERIMENTS = "/api/2.0/mlflow/experiments/search"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def config(tmp_path: Path, **keys: int | float) -> str:
    path = tmp_path / "harvester.toml"
    path.write_text("[import]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return str(path)


def endless(page: dict, stop: int, pause: float = 0.0):
    """A handler answering ``page`` with a new cursor every time (``next_cursor`` and MLflow's
    ``next_page_token``), until ``stop`` requests: then a 500 the test would see instead."""

    def handle(request, server):
        if len(server.seen) > stop:
            reply(request, 500, b"still paging")
            return
        time.sleep(pause)
        cursor = f"c{len(server.seen)}"
        reply(request, 200, {**page, "next_cursor": cursor, "next_page_token": cursor})

    return handle


def test_a_phoenix_listing_that_never_ends_stops_at_the_default_page_cap(tmp_path):
    with loopback(endless({"data": [{"trace_id": TID}]}, stop=1300)) as server:
        res = invoke("import", server.url("phoenix"), "--store", str(tmp_path / "s.db"))
    one_line_error(res, f"phoenix at {server.origin} kept paging: 1,000 pages without an end",
                   "narrow with --since or --limit, or raise import.max_pages")  # fmt: skip
    assert len(server.seen) == 1000
    assert not (tmp_path / "s.db").exists()


def test_a_phoenix_trace_that_never_ends_stops_at_the_configured_cap_also_for_incident(tmp_path):
    span = {"context": {"trace_id": TID, "span_id": "cd" * 8}, "name": "x", "start_time": "2026-01-01T00:00:00"}
    store = str(tmp_path / "s.db")
    with loopback(endless({"data": [span]}, stop=200)) as server:
        res = invoke("import", server.url("phoenix"), TID, "--config", config(tmp_path, max_pages=20), "--store", store)
        one_line_error(res, f"phoenix at {server.origin} trace {TID} kept paging: 20 pages", "raise import.max_pages")
        assert len(server.seen) == 20
        res = invoke("incident", TID, "--from", server.url("phoenix"), "--why", "w", "--config",
                     config(tmp_path, max_pages=5), "--store", store, "--cases", str(tmp_path / "cases"))  # fmt: skip
        one_line_error(res, "kept paging: 5 pages")
    assert not Path(store).exists() and not (tmp_path / "cases").exists()


def test_mlflow_experiments_that_never_end_stop_at_the_page_cap(tmp_path):
    with loopback(endless({"experiments": [{"experiment_id": "1"}]}, stop=200)) as server:
        res = invoke("import", server.url("mlflow"), "--config", config(tmp_path, max_pages=30),
                     "--store", str(tmp_path / "s.db"))  # fmt: skip
    one_line_error(res, f"mlflow at {server.origin} kept paging: 30 pages", "next_page_token", "import.max_pages")
    assert {s.path for s in server.seen} == {_EXPERIMENTS} and len(server.seen) == 30


def test_an_mlflow_page_token_given_before_is_caught_at_once(tmp_path):
    def same_token(request, server):
        if len(server.seen) > 20:
            reply(request, 500, b"looped")
        else:
            reply(request, 200, {"experiments": [{"experiment_id": "1"}], "next_page_token": "t1"})

    with loopback(same_token) as server:
        res = invoke("import", server.url("mlflow"), "--store", str(tmp_path / "s.db"))
    one_line_error(res, f"mlflow at {server.origin}: POST {_EXPERIMENTS}", "next_page_token it had given before")
    assert len(server.seen) == 2


def test_a_pull_past_its_deadline_is_one_line_naming_the_requests(tmp_path):
    with loopback(endless({"data": [{"trace_id": TID}]}, stop=400, pause=0.02)) as server:
        res = invoke("import", server.url("phoenix"), "--deadline", "0.5", "--store", str(tmp_path / "s.db"))
    line = one_line_error(res, f"phoenix at {server.origin} did not finish within the 0.5 s deadline",
                          "raise --deadline (import.deadline)")  # fmt: skip
    assert f"({len(server.seen)} requests)" in line and len(server.seen) < 100


def test_an_answer_over_the_byte_cap_is_refused(tmp_path):
    big = b'{"data": [], "pad": "' + b"x" * (2 << 20) + b'"}'
    with loopback(lambda request, _: reply(request, 200, big)) as server:
        res = invoke("import", server.url("jaeger"), TID, "--config", config(tmp_path, max_answer_mib=1),
                     "--store", str(tmp_path / "s.db"))  # fmt: skip
    one_line_error(res, f"jaeger at {server.origin}: GET /api/traces/{TID}", "over the 1 MiB cap",
                   "import.max_answer_mib")  # fmt: skip


@pytest.mark.slow
def test_an_answer_of_empty_objects_under_the_byte_cap_is_refused_before_it_expands(tmp_path):
    empties = b'{"batches": [' + b"{}," * ((20 << 20) // 3) + b"{}]}"  # 20 MiB: once parsed, ~700 MB
    assert len(empties) < 64 << 20  # under the default byte cap
    with loopback(lambda request, _: reply(request, 200, empties)) as server:
        tracemalloc.start()
        try:
            res = invoke("import", server.url("tempo"), TID, "--store", str(tmp_path / "s.db"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    one_line_error(res, f"tempo at {server.origin}: GET /api/traces/{TID}", "over 2,097,152 JSON values",
                   "64 MiB cap", "import.max_answer_mib")  # fmt: skip
    assert peak < 150 << 20, f"peak {peak >> 20} MiB"


def test_commas_and_colons_inside_strings_are_not_values():
    prose = b'{"text": "' + b"a, b: c, " * 100 + b'"}'
    assert json_values(prose, 10) == 2  # the object and its one member
    assert json_values(b"[{},{},{}]", 100) == 6
