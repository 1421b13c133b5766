"""``where`` checking (asyncmem.backend) and its SQL translation (asyncmem.sql.filters), no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncmem import InvalidInputError
from asyncmem.backend import Condition, check_where
from asyncmem.sql import filters
from asyncmem.sql.statements import filtered_statement

DIALECTS = ["sqlite", "postgresql"]


def test_check_where_normalises() -> None:
    assert check_where(None) == ()
    assert check_where({}) == ()
    assert check_where({"a.b": 1, "c": {"$gt": 2, "$in": ["x", None]}}) == (
        Condition(("a", "b"), "$eq", 1),
        Condition(("c",), "$gt", 2),
        Condition(("c",), "$in", ("x", None)),
    )


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"a": {"$where": "1"}}, "unknown operator '\\$where'"),
        ({"a": {"$" + "x" * 40: 1}}, "unknown operator 'str'"),
        ({"$or": []}, "top-level operators"),
        ({"a b": 1}, "dotted path of names"),
        ({"a": {"b": 1}}, "dotted path"),
        ({"a": [1]}, "JSON scalar"),
        ({"a": {"$in": [1] * 101}}, "at most 100"),
        ({"a": {"$gte": False}}, "numbers or strings"),
    ],
)
def test_messages_say_what_is_wrong(where: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_where(where)


def test_messages_never_echo_operand_values() -> None:
    with pytest.raises(InvalidInputError) as raised:
        check_where({"a": {"$in": [{"secret-value": 1}]}})
    assert "secret-value" not in str(raised.value)


def test_shape_holds_no_names_or_values() -> None:
    one = check_where({"alpha": "x' OR 1=1 --", "n": {"$gt": 5}})
    two = check_where({"beta.gamma": "plain", "m": {"$gt": 7}})
    assert filters.shape_of(one) == filters.shape_of(two)
    assert filters.shape_of(check_where({"n": {"$gt": 5.5}})) != filters.shape_of(
        check_where({"n": {"$gt": 5}})
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_names_and_values_are_bound_never_in_the_sql(dialect: str) -> None:
    where = check_where(
        {
            "weird-name_1.x": "x' OR 1=1 --",
            "q": {"$in": ['"; DROP TABLE memories; --', 3, None, True]},
            "r": {"$lt": "zzz'"},
            "s": {"$exists": True},
            "t": {"$ne": 1.5},
        }
    )
    shape = filters.shape_of(where)
    for kind in ("query", "list_keys", "scan"):
        sql = filtered_statement(dialect, kind, shape)
        for forbidden in ("weird-name", "OR 1=1", "DROP", "zzz", "1.5"):
            assert forbidden not in sql.text, (kind, forbidden)
        bound = filters.values(where, dialect)
        args = sql.args(user_id="u", terms="[]", limit=1, offset=0, after=0, now=0.0, **bound)
        assert len(args) == len(sql.names)
    assert filtered_statement(dialect, "scan", shape) is filtered_statement(dialect, "scan", shape)


def test_bound_values_per_dialect() -> None:
    where = check_where({"a.b": True, "c": None, "d": "x", "e": {"$gt": "m"}, "f": 2})
    assert filters.values(where, "sqlite") == {
        "w0p": '$."a"."b"',
        "w0": "true",
        "w1p": '$."c"',
        "w1": "null",
        "w2p": '$."d"',
        "w2": "x",
        "w3p": '$."e"',
        "w3": "m",
        "w4p": '$."f"',
        "w4": 2,
    }
    assert filters.values(where, "postgresql") == {
        "w0p": ["a", "b"],
        "w0": "true",
        "w1p": ["c"],
        "w1": "null",
        "w2p": ["d"],
        "w2": '"x"',
        "w3p": ["e"],
        "w3": "m",
        "w4p": ["f"],
        "w4": "2",
    }


_json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_anything = st.recursive(
    _json_scalars | st.binary(max_size=5) | st.tuples(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=10) | st.integers(), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=30), _anything, max_size=4) | _anything)
def test_any_input_is_a_filter_or_invalid_input(where: Any) -> None:
    """Whatever comes in: checked conditions that compile, or InvalidInputError."""
    try:
        conditions = check_where(where)
    except InvalidInputError:
        return
    for dialect in DIALECTS:
        sql = filtered_statement(dialect, "list_keys", filters.shape_of(conditions))
        bound = filters.values(conditions, dialect)
        assert set(bound) <= set(sql.names)
