"""``where`` filters evaluated in Python, for backends whose service cannot filter metadata.

The semantics are the SQL store's (:mod:`asyncmem.sql.filters`), so one filter selects the
same memories on every backend:

- equality and ``$in`` compare JSON scalars with their type: ``1`` matches ``1`` and ``1.0``,
  never ``"1"`` or ``true``; ``None`` matches a JSON ``null``;
- ``$gt``/``$gte``/``$lt``/``$lte`` compare numbers with numbers and strings with strings
  (by code point); a field of another type does not match;
- ``$ne`` matches when the field is missing or differs; ``$exists`` asks whether the field is
  present (a JSON ``null`` is present).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from asyncmem.backend import Condition

__all__ = ["matches"]

_MISSING = object()


def _at(metadata: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = metadata
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "str"
    return "other"


def _equal(found: Any, wanted: Any) -> bool:
    return found is not _MISSING and _kind(found) == _kind(wanted) and found == wanted


def _holds(found: Any, condition: Condition) -> bool:
    op, operand = condition.op, condition.operand
    if op == "$eq":
        return _equal(found, operand)
    if op == "$ne":
        return not _equal(found, operand)
    if op == "$in":
        assert isinstance(operand, tuple)
        return any(_equal(found, item) for item in operand)
    if op == "$exists":
        return (found is not _MISSING) is operand
    if found is _MISSING or _kind(found) != _kind(operand) or _kind(found) == "other":
        return False
    if op == "$gt":
        return bool(found > operand)
    if op == "$gte":
        return bool(found >= operand)
    if op == "$lt":
        return bool(found < operand)
    return bool(found <= operand)


def matches(metadata: Mapping[str, Any], conditions: Sequence[Condition]) -> bool:
    """Whether ``metadata`` meets every condition (checked by ``check_where``)."""
    return all(_holds(_at(metadata, c.path), c) for c in conditions)
