"""``asyncmem.export``: the line format, and where ``asyncmem export -o`` may write.

Files are real files under ``tmp_path``; the CLI runs as ``main(argv)`` and, where stdout
itself matters, as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from asyncmem import MemoryEntry, SQLBackend
from asyncmem.cli import main
from asyncmem.export import (
    FIELDS,
    ExportFile,
    LineError,
    check_timestamp,
    entry_to_dict,
    parse_line,
    to_line,
)
from asyncmem.tool import run_memory_tool


@pytest.fixture
def url(tmp_path: Path) -> str:
    store_url = f"sqlite:///{tmp_path / 'memory.db'}"

    async def fill() -> None:
        async with SQLBackend(store_url) as store:
            await store.store("alice", "pet", "Alice has a grey cat", {"n": 1})
            await store.store("bob", "tea", "Bob drinks earl grey")

    asyncio.run(fill())
    return store_url


def export(capsys: pytest.CaptureFixture[str], url: str, output: str) -> tuple[int, str, str]:
    code = main(["export", "--backend", url, "-o", output])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_line_round_trips_every_character_and_hides_terminal_controls() -> None:
    text = "a\x1b[2Jb\x9b31m\u2028c\u2029d\x85e\u202eF\x7fg\x00"[:-1] + '\n\t"\\ ü 猫 😀'
    entry = MemoryEntry("u", "k\x1b]0;x\x07", text, {"m": "\x9b"}, 1.5, 2.5, expires_at=9.0)
    line = to_line(entry)
    assert line.endswith("\n")
    assert line.count("\n") == 1
    assert all(ch not in line for ch in "\x1b\x9b\x85\u2028\u2029\u202e\x7f\x07")
    assert "ü 猫 😀" in line, "readable UTF-8, not ASCII escapes"
    assert list(json.loads(line)) == list(FIELDS)
    assert parse_line(line.encode(), 1, now=0.0) == entry


def test_entry_to_dict_is_what_the_tool_returns() -> None:
    entry = MemoryEntry("u", "k", "v", {"a": [1]}, 1.0, 2.0, score=0.5)
    assert entry_to_dict(entry) == {
        "user_id": "u",
        "key": "k",
        "value": "v",
        "metadata": {"a": [1]},
        "created_at": 1.0,
        "updated_at": 2.0,
        "score": 0.5,
    }
    without_user = entry_to_dict(entry, user_id=False)
    assert "user_id" not in without_user
    assert without_user == {k: v for k, v in entry_to_dict(entry).items() if k != "user_id"}


async def test_the_tool_and_the_cli_describe_a_memory_alike(tmp_path: Path) -> None:
    async with SQLBackend(f"sqlite:///{tmp_path / 'm.db'}") as store:
        entry = await store.store("u", "k", "grey cat", {"n": 1}, ttl=3600)
        answer = json.loads(
            await run_memory_tool(store, {"action": "retrieve", "key": "k"}, user_id="u")
        )
    shown = {name: value for name, value in entry_to_dict(entry).items() if name != "user_id"}
    assert answer["memory"] == shown


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (1.5, True),
        (10**400, False),
        (-(10**400), False),
        (float("inf"), False),
        (float("nan"), False),
        (True, False),
        ("1", False),
        (None, False),
    ],
)
def test_check_timestamp(value: object, ok: bool) -> None:
    if ok:
        assert check_timestamp("created_at", value) == float(value)  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match="created_at must be"):
            check_timestamp("created_at", value)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"user_id": "u", "key": "k", "value": "v", "created_at": 1' + "0" * 400 + "}", "finite"),
        ('{"user_id": "u", "key": "k", "value": "v", "expires_at": 1e400}', "finite"),
        ('{"user_id": "u", "key": "k", "value": "v", "metadata": {"n": 1' + "0" * 5000 + "}}", ""),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"user_id": "u", "key": "k", "value": "v", "metadata": ' + "[" * 500 + "]" * 500 + "}",
            "",
        ),
    ],
)
def test_hostile_lines_are_line_errors(line: str, reason: str) -> None:
    with pytest.raises(LineError, match=f"line 7: .*{reason}") as caught:
        parse_line(line, 7, now=0.0)
    assert caught.value.number == 7
    assert "\n" not in str(caught.value)


def test_export_creates_a_private_file_with_a_permissive_umask(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    target = tmp_path / "dump.jsonl"
    old = os.umask(0)
    try:
        assert export(capsys, url, str(target)) == (0, "exported 2 memories\n", "")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert len(target.read_text().splitlines()) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dump.jsonl", "memory.db"]


def test_export_replaces_a_regular_file_and_makes_it_private(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    target = tmp_path / "dump.jsonl"
    target.write_text("old contents\n")
    target.chmod(0o644)
    assert export(capsys, url, str(target))[0] == 0
    assert "old contents" not in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_export_fsyncs_the_file_and_its_directory(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    target = tmp_path / "dump.jsonl"
    assert export(capsys, url, str(target))[0] == 0
    assert len(synced) == 2
    assert synced[0].endswith(".partial"), "the file's data before it is moved into place"
    assert synced[1] == str(tmp_path)


def test_export_never_overwrites_a_file_that_appears_meanwhile(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "dump.jsonl"

    def export_while_somebody_writes() -> None:
        with ExportFile(str(target)) as out:
            out.write("{}\n")
            target.write_text("somebody else's\n")

    with pytest.raises(FileExistsError):
        export_while_somebody_writes()
    assert target.read_text() == "somebody else's\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dump.jsonl", "memory.db"]


def test_export_works_where_files_cannot_be_hard_linked(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(source: object, target: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    target = tmp_path / "dump.jsonl"
    assert export(capsys, url, str(target)) == (0, "exported 2 memories\n", "")
    assert len(target.read_text().splitlines()) == 2
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(path.name for path in tmp_path.iterdir()) == ["dump.jsonl", "memory.db"]


def test_export_refuses_a_symlink_and_a_directory(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(victim)
    code, out, err = export(capsys, url, str(link))
    assert (code, out) == (1, "")
    assert (
        err
        == f"asyncmem: error: cannot write {link}: it is a symbolic link; name the file itself\n"
    )
    assert link.is_symlink()
    assert victim.read_text() == "keep me\n"
    code, _, err = export(capsys, url, str(tmp_path))
    assert code == 1
    assert "it is a directory" in err
    assert not list(tmp_path.glob(".*.partial"))


def test_export_writes_into_a_device_without_replacing_it(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    assert export(capsys, url, "/dev/null") == (0, "exported 2 memories\n", "")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    code, out, err = export(capsys, url, "/dev/full")
    assert (code, out) == (1, "")
    assert err == "asyncmem: error: cannot write /dev/full: No space left on device\n"
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode), "/dev/full is still the device"


def test_export_to_a_fifo(url: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert main(["export", "--backend", url, "-o", str(fifo)]) == 0
    out, _ = reader.communicate(timeout=30)
    assert len(out.splitlines()) == 2
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_dash_is_stdout_and_the_summary_goes_to_stderr(url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "asyncmem", "export", "-o", "-", "--backend", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["key"] for line in done.stdout.splitlines()] == ["pet", "tea"]
    assert done.stderr == "exported 2 memories\n"
