"""A user's ranking depends on that user's memories only (issue 16, DESIGN.md §6).

For a fixed set of alice's memories (facts and conversation turns) and random memories of
other users, made of words that alice's questions use too, ``query`` for alice returns the same
keys with the same scores with and without the other users' data. benchmarks/isolation.py
measures the same property's cost side (the noisy neighbour).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncmem import SQLBackend

ALICE = "alice"
ALICE_MEMORIES: list[dict[str, Any]] = [
    {"key": "drink", "value": "I take my coffee black every morning"},
    {"key": "tea", "value": "Green tea with lemon after lunch"},
    {"key": "pet", "value": "My dog Rex loves the garden and long walks"},
    {"key": "trip", "value": "Planning a trip to Lisbon with my sister in May"},
    {
        "key": "turn-1",
        "value": "Did you adopt anything last weekend?",
        "metadata": {"session": "s1", "speaker": "Assistant", "date": "8 May 2023"},
    },
    {
        "key": "turn-2",
        "value": "Yes, a puppy! We walk him in the garden before coffee",
        "metadata": {"session": "s1", "speaker": "Alice", "date": "8 May 2023"},
    },
]
QUESTIONS = [
    "coffee or tea?",
    "What did I adopt, a dog or a puppy?",
    "Where is my trip in May?",
    "garden walks with the dog",
    "lemon coffee lunch morning",
]
WORDS = sorted(
    {w.strip("?,!").lower() for q in QUESTIONS for w in q.split()}
    | {"black", "green", "sister", "rex", "weekend", "the", "cat", "piano", "zebra"}
)
OTHERS = st.lists(
    st.tuples(
        st.sampled_from(["bob", "carol", "Alice", "alice2"]),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join),
        st.one_of(st.none(), st.sampled_from(["s1", "s2"])),
    ),
    min_size=1,
    max_size=40,
)


async def _alice_results(store: SQLBackend) -> list[list[tuple[str, float | None]]]:
    return [[(h.key, h.score) for h in await store.query(ALICE, q)] for q in QUESTIONS]


def _same(
    got: list[list[tuple[str, float | None]]], want: list[list[tuple[str, float | None]]]
) -> bool:
    if [[k for k, _ in hits] for hits in got] != [[k for k, _ in hits] for hits in want]:
        return False
    return all(
        abs((a or 0.0) - (b or 0.0)) <= 1e-9
        for hits, wanted in zip(got, want, strict=True)
        for (_, a), (_, b) in zip(hits, wanted, strict=True)
    )


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(others=OTHERS)
async def test_other_users_change_no_score(
    sql_store: SQLBackend, others: list[tuple[str, str, str | None]]
) -> None:
    store = sql_store
    if not await store.list_keys(ALICE):
        await store.store_many(ALICE, ALICE_MEMORIES)
    alone = await _alice_results(store)
    assert all(alone), "every question matches some of alice's memories"
    users = sorted({user for user, _, _ in others})
    try:
        for user in users:
            await store.store_many(
                user,
                [
                    {"key": f"k{n}", "value": value}
                    | ({} if session is None else {"metadata": {"session": session}})
                    for n, (owner, value, session) in enumerate(others)
                    if owner == user
                ],
            )
        assert _same(await _alice_results(store), alone)
    finally:
        for user in users:
            await store.forget_user(user)
