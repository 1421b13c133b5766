"""The pure-Python ``where`` matcher (asyncmem.filtering) against the reference semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncmem.backend import check_where
from asyncmem.filtering import matches
from tests.test_conformance_features import FILTERS, METADATA
from tests.test_conformance_features import matches as reference


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
def test_matches_the_reference_on_the_conformance_filters(where: dict[str, Any]) -> None:
    conditions = check_where(where)
    for metadata in METADATA.values():
        assert matches(metadata, conditions) is reference(metadata, where)


def test_types_are_not_mixed() -> None:
    assert matches({"n": 1.0}, check_where({"n": 1}))
    assert not matches({"n": True}, check_where({"n": 1}))
    assert not matches({"n": 1}, check_where({"n": True}))
    assert not matches({"n": "2"}, check_where({"n": {"$gt": 1}}))
    assert not matches({"n": [5]}, check_where({"n": {"$gt": 1}}))
    assert matches({"n": {"a": 1}}, check_where({"n": {"$ne": None}}))
    assert matches({"s": "é"}, check_where({"s": {"$gt": "z"}}))  # code point order
    assert matches({}, check_where({"a.b": {"$exists": False}}))
    assert matches({"a": None}, check_where({"a": {"$exists": True}}))
    assert matches({"a": 2**70}, check_where({"a": {"$gt": 2**63 - 1}}))


def test_no_conditions_match_everything() -> None:
    assert matches({}, ())
    assert matches({"a": 1}, check_where({}))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False),
    st.sampled_from(["", "a", "b", "é", "10"]),
)
documents = st.dictionaries(
    st.sampled_from(["a", "b"]),
    st.one_of(scalars, st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2)),
    max_size=2,
)
operations = st.one_of(
    scalars,
    st.dictionaries(
        st.sampled_from(["$eq", "$ne", "$in", "$exists", "$gt", "$gte", "$lt", "$lte"]),
        scalars,
        min_size=1,
        max_size=2,
    ),
    st.fixed_dictionaries({"$in": st.lists(scalars, max_size=3)}),
    st.fixed_dictionaries({"$exists": st.booleans()}),
)


def _usable(where: dict[str, Any]) -> bool:
    try:
        check_where(where)
    except Exception:
        return False
    return True


@given(
    documents,
    st.dictionaries(st.sampled_from(["a", "b", "a.b", "b.a"]), operations, max_size=2).filter(
        _usable
    ),
)
def test_matches_the_reference_on_random_documents(
    metadata: dict[str, Any], where: dict[str, Any]
) -> None:
    assert matches(metadata, check_where(where)) is reference(metadata, where)
