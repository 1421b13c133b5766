"""``where`` filters → SQL conditions on the metadata column. Pure functions, no I/O.

The input is already checked (:func:`asyncmem.backend.check_where`): field paths are dotted
names, operands JSON scalars. Here each condition becomes a SQLAlchemy expression whose field
path and operands are all bound parameters, so nothing a caller gives is ever part of the SQL
text. The text depends only on the filter's *shape* (each condition's operator and operand
kind), which is what the store caches compiled statements by.

Semantics, the same on both dialects:
- equality and ``$in`` compare JSON scalars with their type: ``1`` matches ``1`` and ``1.0``,
  never ``"1"`` or ``true``; ``None`` matches a JSON ``null``;
- ``$gt``/``$gte``/``$lt``/``$lte`` compare numbers with numbers and strings with strings
  (by code point); a field of another type does not match;
- ``$ne`` matches when the field is missing or differs; ``$exists`` asks whether the field is
  present (a JSON ``null`` is present).

SQLite: ``json_type`` / ``json_extract`` with a ``$."a"."b"`` path. PostgreSQL: ``jsonb``
``#>`` with a ``text[]`` path, ``jsonb`` equality and ordering, strings compared ``COLLATE "C"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    Boolean,
    Double,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    false,
    func,
    literal,
    literal_column,
    not_,
    or_,
    true,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.expression import ColumnElement

from asyncmem.backend import Condition, Scalar
from asyncmem.sql.models import Memory

__all__ = ["Shape", "clauses", "shape_of", "sqlite_path", "text_at", "values"]

Kind = str
"""An operand's kind: ``"str"``, ``"int"``, ``"float"``, ``"bool"`` or ``"null"``."""
Shape = tuple[tuple[str, Any], ...]
"""Per condition: its operator and its operand kind (a tuple of kinds for ``$in``, the
bool itself for ``$exists``). Never an operand value or a field name."""

_COMPARISONS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _kind(operand: Scalar) -> Kind:
    if operand is None:
        return "null"
    if isinstance(operand, bool):
        return "bool"
    if isinstance(operand, int):
        return "int"
    if isinstance(operand, float):
        return "float"
    return "str"


def shape_of(conditions: Sequence[Condition]) -> Shape:
    shape: list[tuple[str, Any]] = []
    for condition in conditions:
        operand = condition.operand
        if condition.op == "$in":
            assert isinstance(operand, tuple)
            shape.append(("$in", tuple(_kind(item) for item in operand)))
        elif condition.op == "$exists":
            shape.append(("$exists", bool(operand)))
        else:
            assert not isinstance(operand, tuple)
            shape.append((condition.op, _kind(operand)))
    return tuple(shape)


def sqlite_path(path: Sequence[str]) -> str:
    """A SQLite JSON path with every segment quoted (segments are checked: no quotes)."""
    return "$" + "".join(f'."{segment}"' for segment in path)


def _bind(name: str, kind: Kind) -> Any:
    if kind == "int":
        return bindparam(name, type_=Integer())
    if kind == "float":
        return bindparam(name, type_=Double())
    return bindparam(name, type_=String())


def _numeric(json_type: Any) -> ColumnElement[bool]:
    return or_(json_type == literal("integer"), json_type == literal("real"))


class _SQLite:
    @staticmethod
    def eq(path: Any, name: str, kind: Kind) -> ColumnElement[bool]:
        meta = Memory.metadata_
        json_type = func.json_type(meta, path)
        if kind in ("bool", "null"):
            return json_type == bindparam(name, type_=String())
        value = func.json_extract(meta, path)
        if kind == "str":
            return and_(json_type == literal("text"), value == _bind(name, kind))
        return and_(_numeric(json_type), value == _bind(name, kind))

    @staticmethod
    def compare(path: Any, name: str, kind: Kind, op: str) -> ColumnElement[bool]:
        meta = Memory.metadata_
        json_type = func.json_type(meta, path)
        value = func.json_extract(meta, path)
        test = value.op(op, is_comparison=True)(_bind(name, kind))
        if kind == "str":
            return and_(json_type == literal("text"), test)
        return and_(_numeric(json_type), test)

    @staticmethod
    def exists(path: Any) -> ColumnElement[bool]:
        return func.json_type(Memory.metadata_, path).is_not(None)


class _Postgres:
    @staticmethod
    def _at(path: Any) -> Any:
        return type_coerce(Memory.metadata_, JSONB).op("#>", return_type=JSONB)(path)

    @classmethod
    def eq(cls, path: Any, name: str, kind: Kind) -> ColumnElement[bool]:
        operand = cast(bindparam(name, type_=Text()), JSONB)
        equal: ColumnElement[bool] = cls._at(path).op("=", is_comparison=True)(operand)
        return equal

    @classmethod
    def compare(cls, path: Any, name: str, kind: Kind, op: str) -> ColumnElement[bool]:
        found = cls._at(path)
        if kind == "str":
            text = type_coerce(
                type_coerce(Memory.metadata_, JSONB).op("#>>", return_type=Text)(path), Text
            ).collate("C")
            return and_(
                func.jsonb_typeof(found) == literal("string"),
                text.op(op, is_comparison=True)(bindparam(name, type_=Text())),
            )
        operand = cast(bindparam(name, type_=Text()), JSONB)
        return and_(
            func.jsonb_typeof(found) == literal("number"),
            found.op(op, is_comparison=True)(operand),
        )

    @classmethod
    def exists(cls, path: Any) -> ColumnElement[bool]:
        present: ColumnElement[bool] = cls._at(path).is_not(None)
        return present


def text_at(key: str, dialect_name: str) -> ColumnElement[str]:
    """The metadata's string under the top-level ``key`` (a constant of the code, not user
    input), NULL when it is absent or not a string: read in SQL, without decoding the JSON."""
    if dialect_name == "postgresql":
        meta = type_coerce(Memory.metadata_, JSONB)
        name: Any = literal_column(f"'{key}'")
        found = meta.op("->", return_type=JSONB)(name)
        string = meta.op("->>", return_type=Text)(name)
        return case((func.jsonb_typeof(found) == literal_column("'string'"), string))
    path: Any = literal_column(f"'{sqlite_path([key])}'")
    return case(
        (
            func.json_type(Memory.metadata_, path) == literal_column("'text'"),
            type_coerce(func.json_extract(Memory.metadata_, path), Text),
        )
    )


def clauses(shape: Shape, dialect_name: str) -> list[ColumnElement[bool]]:
    """The SQL conditions of a filter of ``shape``; bind ``values(...)`` to them.

    Parameters are named ``w{i}p`` (condition ``i``'s path) and ``w{i}`` / ``w{i}_{j}``
    (its operand, or the ``j``-th value of its ``$in``).
    """
    sql = _Postgres if dialect_name == "postgresql" else _SQLite
    path_type: Any = ARRAY(Text()) if dialect_name == "postgresql" else String()
    result: list[ColumnElement[bool]] = []
    for i, (op, kind) in enumerate(shape):
        path = bindparam(f"w{i}p", type_=path_type)
        if op == "$exists":
            present = sql.exists(path)
            result.append(present if kind else not_(present))
        elif op == "$in":
            options = [sql.eq(path, f"w{i}_{j}", k) for j, k in enumerate(kind)]
            result.append(or_(*options) if options else false())
        elif op == "$eq":
            result.append(sql.eq(path, f"w{i}", kind))
        elif op == "$ne":
            result.append(
                not_(func.coalesce(sql.eq(path, f"w{i}", kind), false(), type_=Boolean()))
            )
        else:
            result.append(sql.compare(path, f"w{i}", kind, _COMPARISONS[op]))
    return result or [true()]


def _operand(operand: Scalar, dialect_name: str) -> Any:
    if dialect_name == "postgresql":
        if isinstance(operand, str):
            return operand
        return json.dumps(operand)
    if isinstance(operand, bool):
        return "true" if operand else "false"
    if operand is None:
        return "null"
    return operand


def _pg_operand(operand: Scalar, op: str) -> Any:
    """PostgreSQL operands are JSON text, except a string compared as text."""
    if op in _COMPARISONS and isinstance(operand, str):
        return operand
    return json.dumps(operand)


def values(conditions: Sequence[Condition], dialect_name: str) -> dict[str, Any]:
    """The bound values of ``conditions`` for :func:`clauses` of their shape."""
    bound: dict[str, Any] = {}
    for i, condition in enumerate(conditions):
        bound[f"w{i}p"] = (
            list(condition.path) if dialect_name == "postgresql" else sqlite_path(condition.path)
        )
        operand = condition.operand
        if condition.op == "$exists":
            continue
        if condition.op == "$in":
            assert isinstance(operand, tuple)
            for j, item in enumerate(operand):
                bound[f"w{i}_{j}"] = (
                    _pg_operand(item, "$eq")
                    if dialect_name == "postgresql"
                    else _operand(item, dialect_name)
                )
            continue
        assert not isinstance(operand, tuple)
        bound[f"w{i}"] = (
            _pg_operand(operand, condition.op)
            if dialect_name == "postgresql"
            else _operand(operand, dialect_name)
        )
    return bound
