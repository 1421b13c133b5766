"""The ``asyncmem`` command: ``main(argv)`` in process and the installed executable, on real
SQLite files under ``tmp_path`` (the developer's default database is never touched: the
conftest points the user data directory into ``tmp_path`` and scrubs ``ASYNCMEM_*``)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncmem import MemoryEntry, SQLBackend
from asyncmem.cli import main
from asyncmem.export import FIELDS as ENTRY_FIELDS
from asyncmem.sql import migrate
from asyncmem.sql.store import MAX_IMPORT_BATCH


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'memory.db'}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def entries(url: str, user_id: str | None = None) -> list[MemoryEntry]:
    async def scan() -> list[MemoryEntry]:
        async with SQLBackend(url) as store:
            return [entry async for entry in store.scan(user_id)]

    return asyncio.run(scan())


def keys(url: str, user_id: str) -> list[str]:
    async def list_keys() -> list[str]:
        async with SQLBackend(url) as store:
            return await store.list_keys(user_id)

    return asyncio.run(list_keys())


def test_store_get_query_list_delete_forget(capsys: pytest.CaptureFixture[str], url: str) -> None:
    b = ("--backend", url)
    assert run(capsys, "store", "alice", "pet", "Alice has a grey cat called Miso", *b) == (
        0,
        "stored alice/pet\n",
        "",
    )
    code, out, _ = run(capsys, "store", "alice", "pet", "Miso is a grey cat", *b)
    assert (code, out) == (0, "updated alice/pet\n")
    run(capsys, "store", "alice", "job", "Alice works as a nurse", "--metadata", '{"n": 1}', *b)

    assert run(capsys, "get", "alice", "pet", *b) == (0, "Miso is a grey cat\n", "")
    code, out, err = run(capsys, "get", "alice", "car", *b)
    assert (code, out) == (1, "")
    assert "no memory 'car'" in err

    code, out, _ = run(capsys, "query", "alice", "What is the cat called?", *b)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["rank", "score", "key", "value"]
    assert lines[1].split()[0] == "1"
    assert lines[1].split()[2:] == ["pet", "Miso", "is", "a", "grey", "cat"]

    assert run(capsys, "list", "alice", *b) == (0, "job\npet\n", "")

    assert run(capsys, "delete", "alice", "job", *b)[:2] == (0, "deleted alice/job\n")
    code, _, err = run(capsys, "delete", "alice", "job", *b)
    assert code == 1
    assert "no memory 'job'" in err

    assert run(capsys, "forget", "alice", *b)[:2] == (0, "forgot 1 memory of alice\n")
    assert keys(url, "alice") == []


def test_json_output_on_every_data_command(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    b = ("--backend", url, "--json")
    code, out, _ = run(capsys, "store", "bob", "tea", "Bob drinks earl grey", *b)
    stored = json.loads(out)
    assert code == 0
    assert list(stored) == list(ENTRY_FIELDS[:-1])  # no expires_at without a ttl
    assert stored["value"] == "Bob drinks earl grey"

    got = json.loads(run(capsys, "get", "bob", "tea", *b)[1])
    assert got == stored
    hits = json.loads(run(capsys, "query", "bob", "what does bob drink", *b)[1])
    assert [hit["key"] for hit in hits] == ["tea"]
    assert isinstance(hits[0]["score"], float)
    assert json.loads(run(capsys, "query", "bob", "the a of", *b)[1]) == []
    assert json.loads(run(capsys, "list", "bob", *b)[1]) == ["tea"]
    exported = tmp_path / "out.jsonl"
    summary = json.loads(run(capsys, "export", "-o", str(exported), *b)[1])
    assert summary == {"exported": 1, "output": str(exported)}
    imported = json.loads(run(capsys, "import", str(exported), *b)[1])
    assert imported["lines"] == imported["imported"] == 1
    assert json.loads(run(capsys, "delete", "bob", "tea", *b)[1]) == {"deleted": True}
    code, out, _ = run(capsys, "delete", "bob", "tea", *b)
    assert (code, json.loads(out)) == (1, {"deleted": False})
    assert json.loads(run(capsys, "forget", "bob", *b)[1]) == {"deleted_count": 0}
    db = json.loads(run(capsys, "db", "current", *b)[1])
    assert db["revisions"] == [db["head"]]


def test_asyncmem_url_chooses_the_store(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASYNCMEM_URL", url)
    assert run(capsys, "store", "carol", "k", "from the environment")[0] == 0
    assert keys(url, "carol") == ["k"]
    info = json.loads(run(capsys, "info")[1])
    assert info["url"].endswith("memory.db")


def test_url_and_backend_name_the_same_store_on_every_command(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """``db`` takes ``--url``; the data commands and ``info`` take it too, as the same
    option as ``--backend`` (``db`` takes ``--backend`` as well)."""
    assert run(capsys, "db", "upgrade", "--backend", url)[0] == 0
    assert run(capsys, "store", "dan", "k", "kept by --url", "--url", url)[0] == 0
    assert run(capsys, "get", "dan", "k", "--backend", url)[1:] == ("kept by --url\n", "")
    assert run(capsys, "list", "dan", "--url", url)[1] == "k\n"
    assert json.loads(run(capsys, "info", "--url", url)[1])["url"].endswith("memory.db")
    assert run(capsys, "delete", "dan", "k", "--url", url)[0] == 0
    assert keys(url, "dan") == []


def test_value_and_metadata_from_the_command_line_and_stdin(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("line one\nline two\n"))
    meta = '{"source": "stdin", "tags": ["a", "b"]}'
    assert run(capsys, "store", "dan", "note", "-", "--metadata", meta, "--backend", url)[0] == 0
    (entry,) = entries(url)
    assert entry.value == "line one\nline two\n"
    assert entry.metadata == {"source": "stdin", "tags": ["a", "b"]}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "required"),
        (("store", "alice", "pet"), "required"),
        (("store", "alice", "pet", "v", "--metadata", "[1]"), "must be a JSON object"),
        (("store", "alice", "pet", "v", "--metadata", "{oops"), "not valid JSON"),
        (("query", "alice", "cats", "--limit", "many"), "not a whole number: 'many'"),
        (("db", "sideways"), "invalid choice"),
        (("frobnicate",), "invalid choice"),
        (("store", "alice", "", "v"), "argument key: must not be empty"),
        (("store", "", "pet", "v"), "argument user_id: must not be empty"),
        (("get", "alice", "x" * 300), "argument key: is longer than 256 characters"),
        (("export", "--user", ""), "argument --user: must not be empty"),
        (
            ("query", "alice", "cats", "--limit", "0"),
            "argument --limit: must be between 1 and 1000",
        ),
        (("import", "-", "--batch-size", "0"), "--batch-size: must be between 1 and 1000"),
        (("import", "-", "--batch-size", "1001"), "--batch-size: must be between 1 and 1000"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], url: str, argv: tuple[str, ...], message: str
) -> None:
    needs_store = argv[:1] in {("store",), ("query",), ("import",)}
    code, out, err = run(capsys, *argv, *(("--backend", url) if needs_store else ()))
    assert code == 2
    assert message in err
    assert out == ""
    assert "Traceback" not in err


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert main(["import", "--help"]) == 0
    assert "JSONL" in capsys.readouterr().out


def test_failures_exit_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    not_a_db = tmp_path / "not.db"
    not_a_db.write_text("this is not a database, it only has a .db name\n" * 100)
    code, _, err = run(capsys, "list", "alice", "--backend", f"sqlite:///{not_a_db}")
    assert code == 1
    assert "not a SQLite database" in err
    code, _, err = run(capsys, "export", "--backend", "null")
    assert code == 1
    assert "SQL store" in err
    code, _, err = run(capsys, "get", "alice", "pet", "--backend", "mysql://x/y")
    assert code == 1
    assert "unsupported database" in err
    code, _, err = run(
        capsys, "store", "a", "k", "v\x00", "--backend", f"sqlite:///{tmp_path / 'm.db'}"
    )
    assert code == 1
    assert "value must not contain NUL" in err
    db = ("--backend", f"sqlite:///{tmp_path / 'm.db'}")
    code, _, err = run(capsys, "import", str(tmp_path / "missing.jsonl"), *db)
    assert code == 1
    assert "cannot read" in err
    assert "Traceback" not in err
    code, _, err = run(capsys, "export", "-o", str(tmp_path / "no" / "dir.jsonl"), *db)
    assert code == 1
    assert f"cannot write {tmp_path / 'no' / 'dir.jsonl'}" in err


def make_memories(url: str, count: int) -> None:
    async def fill() -> None:
        async with SQLBackend(url) as store:
            for number in range(count):
                await store.store(
                    f"user-{number % 3}",
                    f"key-{number}",
                    f'memory {number}: ünïcode \u2028 line\nbreak "quoted" {"x" * number}',
                    {"n": number, "nested": {"list": [1, 2.5, None, True]}} if number % 2 else {},
                )

    asyncio.run(fill())


def test_export_then_import_reproduces_every_memory_exactly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    target = f"sqlite:///{tmp_path / 'target.db'}"
    make_memories(source, 25)
    dump = tmp_path / "dump.jsonl"
    code, out, err = run(capsys, "export", "--backend", source, "-o", str(dump))
    assert (code, out, err) == (0, "exported 25 memories\n", "")
    assert not list(tmp_path.glob("*.partial"))
    lines = dump.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert len(lines) == 26
    assert list(json.loads(lines[0])) == list(ENTRY_FIELDS[:-1])  # no ttl given

    code, out, _ = run(capsys, "import", str(dump), "--backend", target, "--batch-size", "4")
    assert code == 0
    assert out.startswith("imported 25 memories from 25 lines in 7 batches")
    assert entries(target) == entries(source)
    for user in ("user-0", "user-1", "user-2"):
        assert keys(target, user) == keys(source, user)

    code, out, _ = run(capsys, "import", str(dump), "--backend", target, "--json")
    assert json.loads(out)["imported"] == 25
    assert entries(target) == entries(source), "importing twice changes nothing"

    code, out, err = run(capsys, "export", "--backend", target, "--user", "user-1")
    assert code == 0
    assert err == "exported 8 memories\n"
    assert len(out.splitlines()) == 8, "no stray line breaks inside a line"
    assert [json.loads(line)["user_id"] for line in out.splitlines()] == ["user-1"] * 8


def test_import_restores_over_newer_edits_and_from_stdin(
    capsys: pytest.CaptureFixture[str], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_memories(url, 3)
    before = entries(url)
    exported = run(capsys, "export", "--backend", url)[1]
    run(capsys, "store", "user-0", "key-0", "edited later", "--backend", url)
    run(capsys, "store", "user-0", "new", "added later", "--backend", url)
    stdin = io.TextIOWrapper(io.BytesIO(exported.encode()), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    assert run(capsys, "import", "-", "--backend", url)[0] == 0
    after = {(e.user_id, e.key): e for e in entries(url)}
    assert [after[(e.user_id, e.key)] for e in before] == before
    assert after[("user-0", "new")].value == "added later"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"user_id": "u", "key": "k"', "Expecting ',' delimiter"),
        ("[1, 2]", "a line must be a JSON object"),
        ('{"user_id": "u", "key": "k"}', "missing field 'value'"),
        ('{"user_id": "u", "key": "k", "value": "v", "score": 1}', "unknown field 'score'"),
        ('{"user_id": "", "key": "k", "value": "v"}', "user_id must not be empty"),
        ('{"user_id": "u", "key": "k", "value": 5}', "value must be a str"),
        ('{"user_id": "u", "key": "k", "value": "v", "metadata": [1]}', "metadata must be"),
        ('{"user_id": "u", "key": "k", "value": "v", "created_at": "today"}', "created_at"),
        ('{"user_id": "u", "key": "k", "value": "v", "updated_at": NaN}', "updated_at"),
        ('{"user_id": "u", "key": "k", "value": "a\\u0000b"}', "NUL"),
        ("\xff", "not UTF-8"),
    ],
)
def test_a_malformed_line_is_named_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, bad_line: str, message: str
) -> None:
    good = [
        json.dumps({"user_id": "u", "key": f"k{n}", "value": f"v{n}", "created_at": 1.5})
        for n in range(5)
    ]
    dump = tmp_path / "bad.jsonl"
    body = "\n".join([*good[:3], "", bad_line, *good[3:]]) + "\n"
    dump.write_bytes(body.encode("utf-8", "surrogateescape").replace(b"\xc3\xbf", b"\xff"))
    code, out, err = run(capsys, "import", str(dump), "--backend", url, "--batch-size", "2")
    assert code == 1
    assert out == ""
    assert "line 5:" in err
    assert message in err
    assert "nothing was imported" in err
    assert entries(url) == []


def test_lines_without_timestamps_get_the_time_of_the_import(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    dump = tmp_path / "plain.jsonl"
    dump.write_text('{"user_id": "u", "key": "k", "value": "v"}\n')
    assert run(capsys, "import", str(dump), "--backend", url)[0] == 0
    (entry,) = entries(url)
    assert entry.created_at == entry.updated_at > 1_700_000_000
    assert entry.metadata == {}


def test_db_upgrade_current_check_downgrade(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run(capsys, "db", "upgrade", "--url", url)
    assert code == 0
    head = out.split("head: ")[1].rstrip(")\n")
    assert f"revision: {head} (head: {head})" in out
    code, out, _ = run(capsys, "db", "check", "--backend", url)
    assert code == 0
    assert "no drift" in out
    assert run(capsys, "db", "downgrade", "--url", url)[0] == 0
    code, _, err = run(capsys, "db", "check", "--url", url)
    assert code == 1
    assert "not up to date" in err
    assert (
        run(capsys, "db", "current", "--url", url)[1].splitlines()[1].startswith("revision: none")
    )


def test_info_and_demo_still_work(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, _ = run(capsys, "info", "--backend", url)
    assert code == 0
    assert json.loads(out)["backend"] == "sql (sqlite)"
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert "stored 5 memories" in out


def executable() -> Path:
    found = Path(sys.executable).parent / "asyncmem"
    if not found.exists():
        pytest.skip("asyncmem is not installed in this environment (pip install -e .)")
    return found


@pytest.mark.slow
def test_installed_executable(tmp_path: Path) -> None:
    exe = executable()
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "ASYNCMEM_URL": url,
    }

    def sh(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *argv], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )

    assert sh("store", "erin", "pet", "Erin has a parrot").returncode == 0
    assert sh("get", "erin", "pet").stdout == "Erin has a parrot\n"
    assert sh("get", "erin", "nothing").returncode == 1
    assert sh("store").returncode == 2
    dump = sh("export").stdout
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    done = sh("import", "-", "--backend", target, "--json", stdin=dump)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == 1
    assert entries(target) == entries(url)
    assert not (tmp_path / "xdg" / "asyncmem").exists(), "the default database was touched"
    assert shutil.which("asyncmem", path=str(exe.parent)) == str(exe)


async def test_import_entries_and_scan_on_every_sql_store(sql_store: SQLBackend) -> None:
    store = sql_store
    given = [
        MemoryEntry("u1", "a", "first", {"x": 1}, 100.25, 200.5),
        MemoryEntry("u2", "a", "other user", {}, 150.0, 150.0),
        MemoryEntry("u1", "b", "second", {}, 300.0, 400.0),
        MemoryEntry("u1", "a", "first, corrected", {"x": 2}, 100.25, 250.75),
    ]
    assert await store.import_entries(given) == 3
    assert await store.retrieve("u1", "a") == given[3]
    assert await store.list_keys("u1") == ["b", "a"]
    everything = [entry async for entry in store.scan(page_size=1)]
    assert sorted(everything, key=lambda e: (e.user_id, e.key)) == [given[3], given[2], given[1]]
    assert [entry async for entry in store.scan("u2")] == [given[1]]
    assert await store.import_entries([]) == 0
    with pytest.raises(ValueError, match="created_at"):
        await store.import_entries([MemoryEntry("u", "k", "v", {}, float("nan"), 1.0)])
    with pytest.raises(ValueError, match="key"):
        await store.import_entries([given[0], MemoryEntry("u", "", "v", {}, 1.0, 1.0)])
    assert await store.retrieve("u1", "a") == given[3], "a rejected batch wrote nothing"
    too_many = [MemoryEntry("u", f"k{n}", "v", {}, 1.0, 1.0) for n in range(MAX_IMPORT_BATCH + 1)]
    with pytest.raises(ValueError, match="at most"):
        await store.import_entries(too_many)
    assert await store.import_entries(too_many[:-1]) == MAX_IMPORT_BATCH
    assert len(await store.list_keys("u")) == MAX_IMPORT_BATCH
    hits = await store.query("u1", "corrected")
    assert [hit.key for hit in hits] == ["a"], "imported memories are searchable"


def test_where_ttl_history_and_purge(capsys: pytest.CaptureFixture[str], url: str) -> None:
    b = ("--backend", url)
    run(capsys, "store", "alice", "pet", "a grey cat", "--metadata", '{"n": 1}', *b)
    run(capsys, "store", "alice", "pet", "two grey cats", "--metadata", '{"n": 2}', *b)
    run(capsys, "store", "alice", "job", "a nurse", "--metadata", '{"n": 3}', "--ttl", "3600", *b)
    run(capsys, "store", "alice", "gone", "soon", "--ttl", "0.01", *b)
    assert run(capsys, "list", "alice", "--where", '{"n": {"$gte": 2}}', *b) == (
        0,
        "job\npet\n",
        "",
    )
    assert run(capsys, "list", "alice", "--limit", "1", "--offset", "1", *b)[1] == "pet\n"
    code, out, _ = run(capsys, "query", "alice", "grey cats", "--where", '{"n": 2}', "--json", *b)
    assert code == 0
    assert [hit["key"] for hit in json.loads(out)] == ["pet"]
    code, out, _ = run(capsys, "history", "alice", "pet", "--json", *b)
    assert [v["value"] for v in json.loads(out)] == ["two grey cats", "a grey cat"]
    assert run(capsys, "history", "alice", "nothing", *b)[0] == 1
    assert run(capsys, "store", "alice", "k", "v", "--ttl", "-5", *b)[0] == 2
    time.sleep(0.05)
    code, out, _ = run(capsys, "db", "purge", "--url", url)
    assert (code, out.split()[:2]) == (0, ["purged", "1"])


def test_export_import_keeps_expiry(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    run(capsys, "store", "alice", "trip", "hiking in July", "--ttl", "3600", "--backend", source)
    run(capsys, "store", "alice", "pet", "a cat", "--backend", source)
    dump = tmp_path / "dump.jsonl"
    assert run(capsys, "export", "-o", str(dump), "--backend", source)[0] == 0
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [("expires_at" in line) for line in lines] == [True, False]
    assert run(capsys, "import", str(dump), "--backend", target)[0] == 0
    assert entries(target) == entries(source)
    assert entries(target)[0].expires_at == lines[0]["expires_at"]


HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202eevil\u2028x"


def test_stored_text_never_reaches_the_terminal_raw(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    b = ("--backend", url)
    user, key = "mallory" + HOSTILE, "note" + HOSTILE
    outputs = [
        run(capsys, "store", user, key, "grey fox " + HOSTILE, *b),
        run(capsys, "store", user, key, "grey fox again " + HOSTILE, *b),
        run(capsys, "query", user, "grey fox", *b),
        run(capsys, "list", user, *b),
        run(capsys, "history", user, key, *b),
        run(capsys, "get", user, key, "--json", *b),
        run(capsys, "query", user, "fox", "--json", *b),
        run(capsys, "export", *b),
        run(capsys, "get", user, "missing" + HOSTILE, *b),
        run(capsys, "delete", user, key, *b),
        run(capsys, "forget", user, *b),
    ]
    for code, out, err in outputs:
        for text in (out, err):
            assert not set(text) & set(HOSTILE) - set("[]0;ownedvilx2J31m"), (code, out, err)
    assert outputs[3][1] == "note\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202eevil\\u2028x\n"
    assert json.loads(outputs[5][1])["value"] == "grey fox again " + HOSTILE, "JSON stays exact"


def test_get_escapes_on_a_terminal_and_is_exact_in_a_pipe(tmp_path: Path) -> None:
    import pty

    url = f"sqlite:///{tmp_path / 'memory.db'}"
    value = "line one\n\tline two " + HOSTILE
    assert main(["store", "u", "k", value, "--backend", url]) == 0
    argv = [sys.executable, "-m", "asyncmem", "get", "u", "k", "--backend", url]
    piped = subprocess.run(argv, capture_output=True, timeout=60)
    assert piped.stdout == (value + "\n").encode()
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(argv, stdout=follower, stderr=subprocess.PIPE, timeout=60)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0, done.stderr
    assert shown.replace(b"\r\n", b"\n") == (
        b"line one\n\tline two \\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202eevil\\u2028x\n"
    )


def deep(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (("list", "u", "--where", deep(100_000)), 2, "argument --where: nested too deeply"),
        (("query", "u", "cats", "--where", deep(500)), 1, "where: a field's value"),
        (("store", "u", "k", "v", "--metadata", deep(100_000)), 2, "nested too deeply"),
        (("store", "u", "k", "v", "--metadata", deep(500)), 1, "nested more than 64 levels"),
        (("store", "u", "k", "v", "--metadata", '{"n": ' + "9" * 5000 + "}"), 2, "too long"),
        (("store", "u", "k", "v", "--metadata", "nope"), 2, "see asyncmem store --help"),
    ],
)
def test_hostile_arguments_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], url: str, argv: tuple[str, ...], code: int, message: str
) -> None:
    got, out, err = run(capsys, *argv, "--backend", url)
    assert (got, out) == (code, "")
    assert message in err
    assert err.count("\n") == 1
    assert err.startswith("asyncmem")


def test_an_import_with_an_enormous_timestamp_is_one_line(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    dump = tmp_path / "huge.jsonl"
    line = {"user_id": "u", "key": "k", "value": "v"}
    dump.write_text(json.dumps(line)[:-1] + ', "created_at": 1' + "0" * 400 + "}\n")
    code, out, err = run(capsys, "import", str(dump), "--backend", url)
    assert (code, out) == (1, "")
    assert err == (
        "asyncmem: error: line 1: created_at must be a finite number of unix seconds; "
        "nothing was imported\n"
    )


def test_db_commands_on_files_that_are_no_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_text("just some text\n" * 100)
    code, out, err = run(capsys, "db", "upgrade", "--url", f"sqlite:///{not_a_db}")
    assert (code, out) == (1, "")
    assert err == "asyncmem: error: db upgrade failed: the file is not a SQLite database\n"
    assert not_a_db.read_text() == "just some text\n" * 100

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, out, err = run(capsys, "db", "check", "--url", f"sqlite:///{empty}")
    assert (code, out) == (1, "")
    assert err == (
        "asyncmem: error: the database is not up to date: it has no schema yet and this "
        f"asyncmem needs {migrate.HEAD}; run `asyncmem db upgrade`\n"
    )

    missing = tmp_path / "missing.db"
    for action in ("check", "current", "downgrade"):
        code, _, err = run(capsys, "db", action, "--url", f"sqlite:///{missing}")
        assert code == 1
        assert err == (
            f"asyncmem: error: there is no database at {missing}; `asyncmem db upgrade` makes one\n"
        )
    assert not missing.exists(), "asking about a database never creates one"


@pytest.fixture
def no_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a test in which ``asyncmem eval`` gets as far as evaluating."""
    import asyncmem.evaluation

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("evaluated although the command should have refused at once")

    monkeypatch.setattr(asyncmem.evaluation, "evaluate", must_not_run)


@pytest.mark.usefixtures("no_evaluation")
def test_eval_chart_without_matplotlib_fails_before_evaluating(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in [name for name in sys.modules if name.startswith("matplotlib")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = run(capsys, "eval", "--chart", str(tmp_path / "eval.png"))
    assert (code, out) == (1, "")
    assert err == (
        "asyncmem: error: drawing the chart needs matplotlib: pip install 'asyncmem[chart]'\n"
    )
    assert not (tmp_path / "eval.png").exists()


def test_counts_are_grammatical(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    b = ("--backend", url)
    run(capsys, "store", "u", "k", "v", *b)
    dump = tmp_path / "one.jsonl"
    assert run(capsys, "export", "-o", str(dump), *b)[1] == "exported 1 memory\n"
    out = run(capsys, "import", str(dump), *b)[1]
    assert out.startswith("imported 1 memory from 1 line in 1 batch (")
    assert run(capsys, "forget", "u", *b)[1] == "forgot 1 memory of u\n"
    assert run(capsys, "forget", "u", *b)[1] == "forgot 0 memories of u\n"


def test_info_expands_the_home_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, _ = run(capsys, "info", "--backend", "sqlite:///~/notes/memory.db")
    assert code == 0
    info = json.loads(out)
    assert info["path"] == str(tmp_path / "notes" / "memory.db")
    assert info["url"] == f"sqlite+aiosqlite:///{tmp_path / 'notes' / 'memory.db'}"
    assert "~" not in out
    code, out, _ = run(capsys, "db", "upgrade", "--url", "sqlite:///~/notes/memory.db")
    assert code == 0
    assert (
        out.splitlines()[0] == f"database: sqlite+aiosqlite:///{tmp_path / 'notes' / 'memory.db'}"
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "info", "--backend", "sqlite:///relative.db")
    assert json.loads(out)["path"] == str(tmp_path / "relative.db")


def test_unknown_revisions_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    for action in ("upgrade", "downgrade"):
        code, out, err = run(capsys, "db", action, "bogus", "--url", url)
        assert (code, out) == (1, "")
        assert err == "asyncmem: error: Can't locate revision identified by 'bogus'\n"


@pytest.mark.usefixtures("no_evaluation")
def test_eval_checks_where_it_writes_before_evaluating(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for option in ("--json", "--markdown", "--chart"):
        missing = tmp_path / "no" / "such" / "report"
        code, out, err = run(capsys, "eval", option, str(missing))
        assert (code, out) == (1, "")
        assert err == f"asyncmem: error: cannot write {missing}: no such directory\n"


def test_import_from_a_pipe_that_cannot_seek(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    make_memories(url, 4)
    dump = tmp_path / "dump.jsonl"
    assert run(capsys, "export", "-o", str(dump), "--backend", url)[0] == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    with subprocess.Popen(["cp", str(dump), str(fifo)]) as writer:
        code, out, err = run(capsys, "import", str(fifo), "--backend", target)
    assert writer.returncode == 0
    assert (code, err) == (0, ""), err
    assert out.startswith("imported 4 memories from 4 lines in 1 batch")
    assert entries(target) == entries(url)


def test_db_compact_leaves_no_word_of_a_deleted_memory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "memory.db"
    b = ("--backend", f"sqlite:///{path}")
    for i in range(30):
        run(capsys, "store", "bob", f"k{i}", f"filler words number {i}", *b)
    run(capsys, "store", "alice", "secret", "the zqxmarker code", *b)
    assert run(capsys, "delete", "alice", "secret", *b)[0] == 0
    assert b"zqxmarker" not in path.read_bytes()  # secure_delete: no word of it is left
    code, out, err = run(capsys, "db", "compact", "--url", f"sqlite:///{path}")
    assert (code, err) == (0, "")
    assert out.startswith("compacted ")
    assert run(capsys, "get", "bob", "k3", *b)[1].strip() == "filler words number 3"
