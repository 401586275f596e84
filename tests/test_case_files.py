"""Case files: byte-stable saving, loading that names the file and field, layout, suite manifest."""

from __future__ import annotations

import json

import orjson
import pytest

from harvester.canonical import fixture_key
from harvester.case import (
    SCHEMA_FILE,
    AgentCase,
    CaseFolder,
    CaseIds,
    Fixture,
    case_json_schema,
    load_case,
    load_cases,
    save_case,
)
from harvester.errors import CaseFileError, NotFoundError
from harvester.suite import bump_suite, suite_info


def make_case(case_id: str = "refund-after-window", status: str = "pending", **kw) -> AgentCase:
    args = {"query": "refund policy", "request_id": "r-1"}
    fields = dict(
        id=case_id,
        status=status,
        why="refunded outside the window",
        prompt="Refund order A1001 please",
        required_elements=["30 days"],
        checks=[{"check": "answered"}],
        min_steps=2,
        appropriate_tools=["kb_search", "get_order"],
        forbidden_tools=["issue_refund"],
        max_cost=0.2,
        tags=["regression", "unintended_action"],
        ignore_args={"kb_search": ["request_id"]},
        fixtures=[
            Fixture(
                key=fixture_key("kb_search", args, ["request_id"]),
                tool="kb_search",
                args=args,
                result="Refunds within 30 days.",
            ),
            Fixture(
                key=fixture_key("get_order", {"order_id": "A1001"}),
                tool="get_order",
                args={"order_id": "A1001"},
                error={"type": "timeout", "message": "db"},
            ),
        ],
    )
    fields.update(kw)
    return AgentCase(**fields)


def write_json(path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_round_trip_is_byte_identical(tmp_path):
    path = save_case(make_case(), tmp_path)
    first = path.read_bytes()
    assert first.endswith(b"}\n") and first.startswith(b'{\n  "schema": "harvester.case/1",\n  "id"')
    again = save_case(load_case(path), tmp_path / "again")
    assert again.read_bytes() == first
    # key order is the model's field order, whatever order the file was written in
    data = orjson.loads(first)
    # (model_fixtures, judges and labels only when the case has some: older files stay byte-identical)
    absent = ("model_fixtures", "judges", "labels")
    assert list(data) == [f.alias or name for name, f in AgentCase.model_fields.items() if name not in absent]
    # fixtures leave default fields out (no "truncated": false noise), errors stay
    assert "truncated" not in data["fixtures"][0] and data["fixtures"][1]["error"]["type"] == "timeout"


def test_invalid_json_names_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    with pytest.raises(CaseFileError, match="invalid JSON") as err:
        load_case(bad)
    assert str(bad) in str(err.value)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("prompt"), "prompt"),
        (lambda d: d.update(min_steps="two"), "min_steps"),
        (lambda d: d["fixtures"][0].pop("key"), "fixtures.0.key"),
        (lambda d: d.update(colour="red"), "colour"),
        (lambda d: d.update(status="maybe"), "status"),
    ],
)
def test_missing_or_mistyped_field_is_named(tmp_path, mutate, field):
    data = orjson.loads(save_case(make_case(), tmp_path).read_bytes())
    mutate(data)
    path = tmp_path / "refund-after-window.json"
    write_json(path, data)
    with pytest.raises(CaseFileError) as err:
        load_case(path)
    assert str(err.value).startswith(f"{path}: {field}: ")


def test_unknown_check_is_named_at_load(tmp_path):
    path = save_case(make_case(checks=[{"check": "answered"}, {"check": "sounds_polite"}]), tmp_path)
    with pytest.raises(CaseFileError) as err:
        load_case(path)
    assert str(err.value).startswith(f"{path}: checks[1]: unknown check 'sounds_polite'")


def test_bad_check_arguments_are_named(tmp_path):
    path = save_case(make_case(checks=[{"check": "max_steps", "n": "many"}]), tmp_path)
    with pytest.raises(CaseFileError, match=r"checks\[0\]: bad arguments for check 'max_steps'"):
        load_case(path)


def test_fixture_key_that_does_not_match_its_args(tmp_path):
    data = orjson.loads(save_case(make_case(), tmp_path).read_bytes())
    data["fixtures"][1]["args"] = {"order_id": "A1002"}  # edited by hand, key left stale
    path = tmp_path / "refund-after-window.json"
    write_json(path, data)
    with pytest.raises(CaseFileError) as err:
        load_case(path)
    assert str(err.value).startswith(f"{path}: fixtures.1.key: ")
    assert fixture_key("get_order", {"order_id": "A1002"}) in str(err.value)


def test_ignored_args_do_not_change_the_key(tmp_path):
    data = orjson.loads(save_case(make_case(), tmp_path).read_bytes())
    data["fixtures"][0]["args"]["request_id"] = "r-999"  # ignored path: key still valid
    write_json(tmp_path / "refund-after-window.json", data)
    assert load_case(tmp_path / "refund-after-window.json").fixtures[0].args["request_id"] == "r-999"


def test_an_ignore_added_after_harvest_as_the_hint_says_keeps_the_case_loadable(tmp_path):
    """The no_fixture hint says: add "ignore_args" to the case file. The harvested keys were computed
    without it; replay recomputes keys, so the case must load (and args edited by hand still must not)."""
    data = orjson.loads(save_case(make_case(), tmp_path).read_bytes())
    data["ignore_args"] = {**data.get("ignore_args", {}), "get_order": ["order_id", "locale"]}
    path = tmp_path / "refund-after-window.json"
    write_json(path, data)
    assert load_case(path).ignore_args["get_order"] == ["order_id", "locale"]
    data["fixtures"][1]["tool"] = "get_orders"  # a hand edit no ignore explains
    write_json(path, data)
    with pytest.raises(CaseFileError, match=r"fixtures\.1\.key"):
        load_case(path)


def test_id_must_match_file_name(tmp_path):
    path = save_case(make_case(), tmp_path)
    renamed = path.rename(tmp_path / "other.json")
    with pytest.raises(CaseFileError, match=r"other\.json: id: id 'refund-after-window' does not match"):
        load_case(renamed)


def test_unsafe_id_is_rejected():
    with pytest.raises(ValueError, match="not a case id"):
        make_case("../escape")


def test_duplicate_id_across_files(tmp_path):
    save_case(make_case(status="accepted"), tmp_path)
    save_case(make_case(status="pending"), tmp_path / "pending")
    with pytest.raises(CaseFileError) as err:
        load_cases(tmp_path)
    msg = str(err.value)
    assert "duplicate id 'refund-after-window'" in msg
    assert (
        str(tmp_path / "pending" / "refund-after-window.json") in msg
        and str(tmp_path / "refund-after-window.json") in msg
    )


def test_layout_and_status_filter(tmp_path, monkeypatch):
    folder = CaseFolder(tmp_path)
    folder.save(make_case("a", status="accepted"))
    folder.save(make_case("p", status="pending"))
    folder.save(make_case("r", status="rejected"))
    assert (tmp_path / "a.json").is_file() and (tmp_path / "pending/p.json").is_file()
    assert (tmp_path / "rejected/r.json").is_file()
    assert [c.id for c in load_cases(tmp_path, status="accepted")] == ["a"]
    assert sorted(c.id for c in load_cases(tmp_path)) == ["a", "p", "r"]
    monkeypatch.setenv("HARVESTER_CASES", str(tmp_path))
    assert [c.id for c in load_cases(status="pending")] == ["p"]
    with pytest.raises(CaseFileError, match="unknown status"):
        load_cases(tmp_path, status="done")


def test_save_moves_between_status_folders(tmp_path):
    folder = CaseFolder(tmp_path)
    case = make_case("p")
    folder.save(case)
    case.status = "accepted"
    path = folder.save(case)
    assert path == tmp_path / "p.json" and not (tmp_path / "pending/p.json").exists()
    assert folder.find("p") == path


def test_unknown_id_suggests_near_ones(tmp_path):
    CaseFolder(tmp_path).save(make_case("refund-after-window"))
    with pytest.raises(NotFoundError, match="did you mean refund-after-window"):
        CaseFolder(tmp_path).find("refund-after-windw")


def test_unique_id(tmp_path):
    folder = CaseFolder(tmp_path)
    folder.save(make_case("x"))
    folder.save(make_case("x-2", status="accepted"))
    assert folder.unique_id("x") == "x-3" and folder.unique_id("y") == "y"


def test_suite_bump_only_when_accepted_content_changes(tmp_path):
    folder = CaseFolder(tmp_path)
    folder.save(make_case("a", status="accepted"))
    first = bump_suite(tmp_path)
    assert first.version == "1.0.0" and first.cases == 1
    assert bump_suite(tmp_path).version == "1.0.0"  # nothing changed
    folder.save(make_case("p"))  # pending cases are not part of the suite
    assert bump_suite(tmp_path).version == "1.0.0"
    assert suite_info(tmp_path).version == "1.0.0"
    folder.save(make_case("a", status="accepted", why="edited"))
    info = suite_info(tmp_path)
    assert info.version == f"1.0.0+{info.content_hash[:8]}"  # edited since the last bump
    assert bump_suite(tmp_path).version == "1.1.0"
    on_disk = orjson.loads((tmp_path / "suite.json").read_bytes())
    assert on_disk["version"] == "1.1.0" and on_disk["content_hash"] == info.content_hash


def test_reformatting_a_case_does_not_change_the_suite_hash(tmp_path):
    path = CaseFolder(tmp_path).save(make_case("a", status="accepted"))
    before = suite_info(tmp_path).content_hash
    path.write_text(json.dumps(orjson.loads(path.read_bytes()), indent=7))
    assert suite_info(tmp_path).content_hash == before


def test_bad_suite_manifest_is_named(tmp_path):
    (tmp_path / "suite.json").write_text('{"name": "s", "version": "one", "content_hash": "x"}')
    with pytest.raises(CaseFileError, match=r"suite\.json: version"):
        suite_info(tmp_path)


def test_shipped_schema_is_up_to_date():
    shipped = orjson.loads(SCHEMA_FILE.read_bytes())
    assert shipped == case_json_schema(), (
        "harvester/case.schema.json is stale: run "
        "python -c 'from harvester.case import write_case_schema; write_case_schema()'"
    )
    assert shipped["additionalProperties"] is False and "prompt" in shipped["required"]


def test_negative_bounds_are_one_line_errors_not_tracebacks(tmp_path):
    import orjson

    from harvester.case import AgentCase, load_case, save_case
    from harvester.errors import CaseFileError

    path = save_case(AgentCase(id="neg", prompt="p", why="w"), tmp_path)
    for field, value in (("max_cost", -1.0), ("min_steps", -3)):
        data = orjson.loads(path.read_bytes())
        data[field] = value
        path.write_bytes(orjson.dumps(data))
        try:
            load_case(path)
        except CaseFileError as exc:
            assert str(path) in str(exc) and field in str(exc)
        else:
            raise AssertionError(f"{field}={value} loaded")


def test_case_ids_name_many_cases_after_one_slug_as_probing_would():
    ids = CaseIds({"x", "x-2", "x-4", "y"})
    got = [ids.claim("x") for _ in range(4)] + [ids.claim("x-5"), ids.claim("x"), ids.claim("z"), ids.claim("z")]
    assert got == ["x-3", "x-5", "x-6", "x-7", "x-5-2", "x-8", "z", "z-2"]


def test_case_ids_probe_each_suffix_once_per_base():
    probed: list[str] = []

    class Watched(set):
        def __contains__(self, item: object) -> bool:
            probed.append(str(item))
            return super().__contains__(item)

    ids = CaseIds(["slug"])
    ids._taken = Watched(ids._taken)
    for _ in range(200):
        ids.claim("slug")
    assert len(probed) < 3 * 200  # probing from -2 every time asks ~200*200/2
