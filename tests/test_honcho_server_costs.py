"""What a real Honcho server does that a plain fake would hide (issue 19): token counting
that is slow on long runs without spaces, messages that are never deleted, a frozen server,
and a workspace that cannot be deleted while it has active sessions. The real SDK on
tests/fake_honcho.py, which models each of these."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncmem import BackendError, InvalidInputError
from asyncmem.backend import MAX_VALUE_BYTES
from asyncmem.honcho import (
    MAX_MESSAGE_CHARS,
    MAX_MESSAGES_PER_CALL,
    MAX_RUN_BYTES,
    HonchoBackend,
    _chunks,
)
from tests.fake_honcho import (
    TEST_KEY,
    FakeHoncho,
    drop_workspace,
    fake_backend,
    token_count_seconds,
)

honcho = pytest.importorskip("honcho")

LOCAL = "http://127.0.0.1:8000"
RUN = re.compile(r"\s+|\S+")
BIGGEST_EMOJI_VALUE = "🐈" * (MAX_VALUE_BYTES // 4)


@pytest.fixture
def fake() -> FakeHoncho:
    return FakeHoncho(api_key=TEST_KEY)


@pytest.fixture
async def memory(fake: FakeHoncho) -> AsyncIterator[HonchoBackend]:
    async with fake_backend(fake) as backend:
        yield backend


def run_cost(text: str) -> int:
    return sum(len(m.group().encode()) ** 2 for m in RUN.finditer(text))


# The fake's token-counting cost: it must time out the way the real server did.


def test_the_cost_model_is_calibrated_on_the_measured_message() -> None:
    assert token_count_seconds("🐈" * 25_000) == pytest.approx(3.9)
    assert token_count_seconds("word " * 5_000) < 0.001
    # Quadratic in a run's length, linear in the number of runs.
    assert token_count_seconds("a" * 20_000) == pytest.approx(4 * token_count_seconds("a" * 10_000))
    assert token_count_seconds("a" * 10_000 + " " + "a" * 10_000) == pytest.approx(
        2 * token_count_seconds("a" * 10_000), rel=1e-3
    )


async def test_a_slow_request_times_out_but_takes_effect_on_the_server(
    fake: FakeHoncho,
) -> None:
    """Issue 19's failure: 1 MiB of emoji in 25,000-character messages is ~40 s of token
    counting (~41 s measured), past a 30 s timeout; the server finishes the abandoned
    request anyway."""
    client = honcho.Honcho(
        base_url=LOCAL,
        api_key=TEST_KEY,
        workspace_id="w",
        timeout=30.0,
        max_retries=0,
        http_client=fake.client(),
    )
    session = client.session("s", peers="p")
    parts = [BIGGEST_EMOJI_VALUE[i : i + 25_000] for i in range(0, 262_144, 25_000)]
    with pytest.raises(honcho.TimeoutError):
        session.add_messages([honcho.MessageCreateParams(content=p, peer_id="p") for p in parts])
    assert fake.message_seconds[-1] == pytest.approx(39.9, abs=0.1)
    assert len(fake.messages) == len(parts)


async def test_the_biggest_value_stores_fast_on_the_cost_model(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    """The value of test_value_size_limit_is_in_utf8_bytes[honcho]: every request's modelled
    token counting stays under a second (a 5 s timeout here), and it round-trips."""
    await memory.store("alice", "big", "before")
    fake.message_seconds.clear()
    stored = await memory.store("alice", "big", BIGGEST_EMOJI_VALUE)
    assert stored.value == BIGGEST_EMOJI_VALUE
    assert max(fake.message_seconds) < 1.0
    assert sum(fake.message_seconds) < 2.0
    assert len(fake.message_seconds) == 3  # 256 messages, at most 100 a request
    entry = await memory.retrieve("alice", "big")
    assert entry is not None
    assert entry.value == BIGGEST_EMOJI_VALUE


async def test_a_long_space_free_value_is_found_again(memory: HonchoBackend) -> None:
    await memory.store("alice", "blob", "x" * 300_000 + " needle " + "y" * 10)
    assert [e.key for e in await memory.query("alice", "needle")] == ["blob"]


async def test_prose_stays_in_few_messages_cut_between_words(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    # "zeppelin" straddles the 25,000th character, where fixed cuts split it.
    value = "w " * 12_498 + "zeppelin " + "filler " * 10_000
    assert value.index("zeppelin") < MAX_MESSAGE_CHARS < value.index("zeppelin") + 8
    await memory.store("alice", "long", value)
    contents = [m.content for m in fake.messages]
    assert len(contents) == 4
    assert "".join(contents) == value
    assert any("zeppelin" in c for c in contents)
    assert [e.key for e in await memory.query("alice", "zeppelin")] == ["long"]


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "é", "🐈", " ", "\n", "e\u0301", "aaaa"])).map("".join),
    max_run_bytes=st.sampled_from([4, 7, 16, 64]),
)
def test_chunks_keep_every_message_within_its_budget(text: str, max_run_bytes: int) -> None:
    chunks = _chunks(text, max_run_bytes)
    assert "".join(chunks) == text
    assert all(chunks) or chunks == [""]
    for chunk in chunks:
        assert len(chunk) <= MAX_MESSAGE_CHARS
        assert run_cost(chunk) <= max_run_bytes**2


@pytest.mark.parametrize(
    "value",
    [
        BIGGEST_EMOJI_VALUE,
        "a" * MAX_VALUE_BYTES,
        " " * MAX_VALUE_BYTES,
        "e\u0301" * (MAX_VALUE_BYTES // 3),
        ("tulips and a grey cat " * 50_000)[:MAX_VALUE_BYTES],
        ("x" * 5_000 + " ") * 200,
    ],
    ids=["emoji", "letters", "spaces", "combining", "prose", "long-words"],
)
def test_chunks_of_the_biggest_values(value: str) -> None:
    chunks = _chunks(value)
    assert "".join(chunks) == value
    assert all(len(c) <= MAX_MESSAGE_CHARS for c in chunks)
    assert all(run_cost(c) <= MAX_RUN_BYTES**2 for c in chunks)
    # One message is under 7 ms of modelled token counting; a request of 100, under 0.7 s.
    assert MAX_MESSAGES_PER_CALL * max(map(token_count_seconds, chunks)) < 0.7


def test_prose_is_cut_only_between_words() -> None:
    value = ("tulips and a grey cat " * 50_000)[:MAX_VALUE_BYTES]
    chunks = _chunks(value)
    assert len(chunks) == -(-len(value) // MAX_MESSAGE_CHARS)
    assert all(c.endswith(" ") for c in chunks[:-1])


# Overwritten keys, deleted sessions and big values must not crowd `query`.


async def test_overwrites_of_one_key_do_not_hide_other_memories(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    """Issue 19: after 25 overwrites of one key, query("tulips", limit=10) found only it."""
    await memory.store("alice", "garden", "Alice planted tulips by the gate")
    await memory.store("alice", "market", "Alice buys tulips at the market")
    for i in range(25):
        await memory.store("alice", "note", f"tulips note revision {i}")
    assert len(fake.messages) == 27  # nothing is ever deleted
    hits = await memory.query("alice", "tulips", limit=10)
    assert sorted(h.key for h in hits) == ["garden", "market", "note"]
    assert next(h for h in hits if h.key == "note").value == "tulips note revision 24"


async def test_stale_revisions_ranked_above_the_current_one(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    """Old revisions that rank higher than the current one fill the window; the search goes
    on for the current revision of that key, and for the others."""
    await memory.store("alice", "garden", "tulips " + "and other flowers " * 20)
    for _ in range(30):
        await memory.store("alice", "note", "tulips tulips tulips")
    await memory.store("alice", "note", "tulips " + "once, among many words " * 20)
    hits = await memory.query("alice", "tulips", limit=10)
    assert sorted(h.key for h in hits) == ["garden", "note"]
    assert next(h for h in hits if h.key == "note").value.startswith("tulips once")


async def test_deleted_keys_awaiting_the_worker_do_not_hide_others(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    await memory.store("alice", "kept", "tulips that stay in the garden by the old stone wall")
    for i in range(40):
        await memory.store("alice", f"gone{i}", f"tulips to delete {i}")
        await memory.delete("alice", f"gone{i}")
    assert [h.key for h in await memory.query("alice", "tulips", limit=3)] == ["kept"]


async def test_a_big_value_matching_everywhere_does_not_hide_others(
    memory: HonchoBackend,
) -> None:
    await memory.store("alice", "small", "a few tulips")
    await memory.store("alice", "emoji", "tulips " + "🐈" * 60_000)
    # 200 messages, each with "tulips" (a 4,000-byte run fills a message's budget).
    await memory.store("alice", "many", " ".join(["y" * 4000 + " tulips"] * 200))
    hits = await memory.query("alice", "tulips", limit=10)
    assert sorted(h.key for h in hits) == ["emoji", "many", "small"]


async def test_widening_stops_when_the_window_is_not_full(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    for i in range(12):
        await memory.store("alice", "note", f"tulips revision {i}")
    before = fake.count("POST", "/search")
    assert [h.key for h in await memory.query("alice", "tulips", limit=1)] == ["note"]
    assert fake.count("POST", "/search") - before == 1
    before = len(fake.requests)
    hits = await memory.query("alice", "tulips", limit=10)  # a window of 20: not full
    assert [h.key for h in hits] == ["note"]
    assert len(fake.requests) - before == 2


async def test_widening_with_where_filters(memory: HonchoBackend) -> None:
    await memory.store("alice", "wanted", "tulips of the wanted kind", {"kind": "wanted"})
    for i in range(120):
        await memory.store("alice", f"k{i}", f"tulips number {i}", {"kind": "other"})
    hits = await memory.query("alice", "tulips", where={"kind": "wanted"})
    assert [h.key for h in hits] == ["wanted"]


# A frozen server: the health probe answers within its own timeout, without retries.


async def test_is_available_makes_one_short_request_without_retries(fake: FakeHoncho) -> None:
    async with fake_backend(fake, timeout=30.0, max_retries=2, probe_timeout=0.05) as memory:
        fake.slow(times=10)
        before = len(fake.requests)
        assert await memory.is_available() is False
        assert len(fake.requests) - before == 1
        assert fake.read_timeouts[-1] == 0.05
        assert await memory.is_available() is False
        fake.slow_requests = 0
        assert await memory.is_available() is True
        await memory.store("alice", "pet", "cat")
        assert fake.read_timeouts[-1] == 30.0


def test_probe_timeout_is_checked_and_capped() -> None:
    for bad in (0, -1.0, "3", True, None, float("nan"), float("inf"), 10**400):
        with pytest.raises(InvalidInputError, match="probe_timeout"):
            HonchoBackend(base_url=LOCAL, probe_timeout=bad)  # type: ignore[arg-type]
    assert HonchoBackend(base_url=LOCAL, timeout=1.0).probe_timeout == 1.0
    assert HonchoBackend(base_url=LOCAL).probe_timeout == 3.0


async def test_a_failing_probe_never_raises(fake: FakeHoncho) -> None:
    async with fake_backend(fake) as memory:
        fake.fail(503)
        assert await memory.is_available() is False
        fake.fail(401)
        assert await memory.is_available() is False
        assert await memory.is_available() is True


# Clean-up: Honcho refuses to delete a workspace with active sessions.


async def test_a_workspace_with_active_sessions_cannot_be_deleted(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    await memory.store("alice", "pet", "cat")
    with pytest.raises(BackendError, match="409"):
        await memory._call("drop", lambda client: client.delete_workspace("asyncmem"))
    assert "asyncmem" in fake.workspaces


async def test_drop_workspace_deletes_sessions_then_the_workspace(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    for i in range(130):
        await memory.store(f"user{i % 3}", f"k{i}", "v")
    await memory._call("setup", lambda client: client.session("foreign", metadata={"x": 1}))
    await memory._call("drop", drop_workspace, "asyncmem")
    assert "asyncmem" not in fake.workspaces
    assert not fake.sessions
    assert not fake.messages


async def test_drop_workspace_raises_when_the_server_keeps_refusing(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    await memory.store("alice", "pet", "cat")
    fake.fail(409, times=3, method="DELETE", path_suffix="/workspaces/asyncmem")
    with pytest.raises(BackendError, match="409"):
        await memory._call(
            "drop", lambda client: drop_workspace(client, "asyncmem", attempts=3, pause=0)
        )
    assert "asyncmem" in fake.workspaces
    fake.fail(409, times=2, method="DELETE", path_suffix="/workspaces/asyncmem")
    await memory._call("drop", lambda client: drop_workspace(client, "asyncmem", pause=0))
    assert "asyncmem" not in fake.workspaces


async def test_a_full_window_with_enough_memories_costs_no_extra_call(
    fake: FakeHoncho, memory: HonchoBackend
) -> None:
    for i in range(20):
        await memory.store("alice", f"fact{i}", f"Alice fact {i}: a grey cat and tulips {i}")

    async def calls(text: str) -> int:
        before = len(fake.requests)
        assert await memory.query("alice", text)
        return len(fake.requests) - before

    assert await calls("tulips") == 2  # a full window of 20, read once
    assert await calls("A grey cat, 7?") == 1 + 3 + 1  # the words, then each, one read
