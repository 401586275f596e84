import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvester.canonical import args_hash, canonical_bytes, canonical_json, drop_paths, fixture_key

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


@pytest.mark.slow
@given(json_objects)
def test_hash_ignores_key_order(obj):
    reordered = dict(reversed(list(obj.items())))
    assert args_hash(obj) == args_hash(reordered)


@given(json_objects, st.text(min_size=1, max_size=8), json_scalars, json_scalars)
def test_hash_sensitive_to_every_value(obj, key, a, b):
    if canonical_json(a) == canonical_json(b):
        return
    assert args_hash({**obj, key: a}) != args_hash({**obj, key: b})


@given(json_objects)
def test_hash_is_16_hex_of_sha256_of_canonical_json(obj):
    h = args_hash(obj)
    assert len(h) == 16 and int(h, 16) >= 0
    assert h == hashlib.sha256(canonical_bytes(obj)).hexdigest()[:16]


def test_canonical_json_is_sorted_utf8_and_stable_numbers():
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert canonical_bytes({"x": 2.0}) == canonical_bytes({"x": 2})
    assert canonical_json({"x": 0.1}) == '{"x":0.1}'
    assert canonical_json({"t": (1, 2)}) == '{"t":[1,2]}'


def test_nested_key_order_ignored():
    assert args_hash({"f": {"a": 1, "b": 2}}) == args_hash({"f": {"b": 2, "a": 1}})


def test_ignore_dotted_paths():
    a = {"query": "refund", "filters": {"since": "2026-01-01", "kind": "faq"}, "request_id": "r1"}
    b = {"query": "refund", "filters": {"since": "2026-11-30", "kind": "faq"}, "request_id": "r2"}
    assert args_hash(a) != args_hash(b)
    assert args_hash(a, ignore=["filters.since", "request_id"]) == args_hash(b, ignore=["filters.since", "request_id"])
    # Other values still count.
    c = {**b, "filters": {"since": "x", "kind": "policy"}}
    assert args_hash(a, ignore=["filters.since", "request_id"]) != args_hash(c, ignore=["filters.since", "request_id"])


def test_ignore_wildcards_and_list_indexes():
    v = {"items": [{"id": 1, "ts": 5}, {"id": 2, "ts": 6}]}
    assert drop_paths(v, ["items.*.ts"]) == {"items": [{"id": 1}, {"id": 2}]}
    assert drop_paths(v, ["items.0"]) == {"items": [{"id": 2, "ts": 6}]}
    assert drop_paths(v, ["missing.path"]) == v


def test_fixture_key_format():
    assert fixture_key("kb_search", {"query": "x"}) == "kb_search:" + args_hash({"query": "x"})
