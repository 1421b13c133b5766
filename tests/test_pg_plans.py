"""PostgreSQL's cached plans: a generic plan priced while the tables were small must not scan
every user's postings once they are large (issue 16's noisy neighbour before ``ANALYZE``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from asyncmem import SQLBackend
from asyncmem.sql.search import query_terms
from asyncmem.sql.terms import question_terms
from tests.backends import BACKEND_FACTORIES, PG_URL, pg_schema

pytestmark = pytest.mark.skipif("postgresql" not in BACKEND_FACTORIES, reason="PostgreSQL is off")


def _scans(node: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(node["Node Type"], node.get("Relation Name", ""))]
    for child in node.get("Plans", []):
        found += _scans(child)
    return found


async def test_a_plan_cached_while_small_reads_the_index_once_large() -> None:
    # A new schema: its tables have never been analysed, as on a new database.
    async with pg_schema() as schema, SQLBackend(PG_URL, schema=schema, auto_migrate=True) as sql:
        await sql.store("alice", "a1", "I drink coffee every morning")
        await sql.store("alice", "a2", "tea in the afternoon")
        query = sql._sql.query
        terms = question_terms(query_terms("coffee or tea?"))
        literal = "'{" + ",".join(terms) + "}'"

        async def plan(transaction: Any) -> dict[str, Any]:
            connection = transaction._connection  # the store's own connection and settings
            await connection.execute(f"PREPARE asked(TEXT[], VARCHAR, INTEGER) AS {query.text}")
            ask = f"EXECUTE asked({literal}, 'alice', 50)"
            # What PostgreSQL may choose on its own after five calls, made certain: the
            # generic plan, priced now and kept.
            await connection.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            await connection.execute(ask)
            await sql.store_many(
                "bob", [{"key": f"b{i}", "value": f"coffee number {i}"} for i in range(2000)]
            )
            explained = await connection.fetchval(f"EXPLAIN (FORMAT JSON) {ask}")
            await connection.execute("DEALLOCATE asked")
            found: dict[str, Any] = json.loads(explained)[0]["Plan"]
            return found

        scans = _scans(await sql._driver.atomic(plan))
        assert ("Seq Scan", "search_terms") not in scans, scans
        hits = await sql.query("alice", "coffee or tea?")
        assert sorted(hit.key for hit in hits) == ["a1", "a2"]


async def test_a_connection_plans_each_statement_once() -> None:
    """No call pays for planning its statement again (0.4 ms of a 1 ms query at 1,000
    memories), whatever the users' sizes: every plan the store's connection ran is generic."""
    async with pg_schema() as schema, SQLBackend(PG_URL, schema=schema, auto_migrate=True) as sql:
        await sql.store_many("bob", [{"key": f"b{i}", "value": f"coffee {i}"} for i in range(300)])
        await sql.store("alice", "a1", "I drink coffee every morning")
        for _ in range(8):
            for user in ("alice", "bob"):
                await sql.query(user, "coffee or tea?")
                await sql.retrieve(user, "a1")

        async def plans(transaction: Any) -> list[Any]:
            found: list[Any] = await transaction._connection.fetch(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            return found

        found = await sql._driver.atomic(plans)
        asked = [row for row in found if row["statement"] == sql._sql.query.text]
        assert asked
        assert all(row["custom_plans"] == 0 for row in found), found
        assert sum(row["generic_plans"] for row in asked) >= 16
