"""The ``asyncmem`` command: small functions over the public API, one per subcommand."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import asyncmem
from asyncmem.backend import (
    MAX_LIMIT,
    MAX_PAGE_SIZE,
    MemoryBackend,
    MemoryEntry,
    check_id,
    check_metadata,
    check_ttl,
    check_value,
)
from asyncmem.config import open_backend
from asyncmem.errors import AsyncmemError, InvalidInputError
from asyncmem.sql import migrate
from asyncmem.sql.engine import (
    default_path,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
from asyncmem.sql.store import MAX_IMPORT_BATCH, SQLBackend

__all__ = ["main"]

DEMO_MEMORIES = [
    ("pet", "Alice has a grey cat called Miso who sleeps on the piano."),
    ("job", "Alice works night shifts as a nurse at St. Mary's hospital."),
    ("food", "Alice loves spicy Thai curries but cannot stand olives."),
    ("trip", "Alice is planning a hiking trip to the Dolomites next July."),
    ("sister", "Alice's sister Jenny lives in Toronto and teaches piano."),
]
DEMO_QUESTIONS = [
    "What is the name of Alice's cat?",
    "Which hospital does she work at?",
    "Where does her sister live?",
    "When are the Dolomites hikes planned?",
]


def _info(args: argparse.Namespace) -> int:
    backend = open_backend(args.backend)
    details = {
        "version": asyncmem.__version__,
        "backend": backend.backend_name,
        "is_cloud": backend.is_cloud,
        "default_path": str(default_path()),
    }
    if isinstance(backend, SQLBackend):
        details["url"] = backend.url
        details["schema_head"] = migrate.head_revision()
    print(json.dumps(details, indent=2))
    return 0


async def _demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        spec = args.backend or f"sqlite:///{Path(scratch) / 'demo.db'}"
        backend: MemoryBackend = open_backend(spec)
        async with backend:
            print(f"backend: {backend.backend_name}")
            user = "asyncmem-demo"
            for key, value in DEMO_MEMORIES:
                await backend.store(user, key, value, {"source": "demo"})
            print(f"stored {len(DEMO_MEMORIES)} memories for {user!r}\n")
            for question in DEMO_QUESTIONS:
                print(f"? {question}")
                for rank, hit in enumerate(await backend.query(user, question, limit=3), 1):
                    print(f"  {rank}. [{hit.key}] {hit.value}  (score {hit.score:.3f})")
            await backend.forget_user(user)
    return 0


async def _db(args: argparse.Namespace) -> int:
    url = normalize_url(args.url)
    if args.action == "purge":
        async with SQLBackend(url) as backend:
            purged = await backend.purge_expired()
        print(f"purged {purged} expired memories from {backend.url}")
        return 0
    path = sqlite_path(url)
    if path is not None and args.action == "upgrade":
        await asyncio.to_thread(prepare_sqlite_file, path)
    engine = make_engine(url)
    try:
        if args.action == "check":
            await migrate.check(engine)
        elif args.action == "upgrade":
            await migrate.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            await migrate.downgrade(engine, args.revision or "base")
        revisions = await migrate.current(engine)
    finally:
        await engine.dispose()
    head = migrate.head_revision()
    at = ", ".join(revisions) or "none"
    database = url.render_as_string(hide_password=True)
    if args.json:
        _print_json({"database": database, "revisions": list(revisions), "head": head})
        return 0
    print(f"database: {database}")
    print(f"revision: {at} (head: {head})")
    if args.action == "check":
        print("schema: matches the models (no drift)")
    return 0


ENTRY_FIELDS = ("user_id", "key", "value", "metadata", "created_at", "updated_at", "expires_at")
"""The fields of one line of ``asyncmem export`` / ``import``, in this order (``expires_at``
only for memories stored with a ``ttl``)."""
IMPORT_BATCH = 500


class _Failed(Exception):
    """A data command failed in a way its message explains (exit code 1)."""


def _print_json(data: object) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


def _entry_dict(entry: MemoryEntry) -> dict[str, Any]:
    data: dict[str, Any] = {
        "user_id": entry.user_id,
        "key": entry.key,
        "value": entry.value,
        "metadata": dict(entry.metadata),
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
    }
    if entry.expires_at is not None:
        data["expires_at"] = entry.expires_at
    if entry.score is not None:
        data["score"] = entry.score
    return data


_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _jsonl(data: dict[str, Any]) -> str:
    """One JSON line, readable UTF-8, with no character any reader might split lines on."""
    return json.dumps(data, ensure_ascii=False).translate(_LINE_BREAKS) + "\n"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _id(text: str) -> str:
    """argparse type: a user id or key (so a bad one is a usage error, exit code 2)."""
    try:
        return check_id("it", text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("it ")) from None


def _count(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an int from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
        return number

    return parse


_WHERE_HELP = (
    'only memories whose metadata matches, e.g. \'{"topic": "work"}\' or \'{"n": {"$gte": 2}}\''
)


def _seconds(text: str) -> float:
    """argparse type: a positive number of seconds."""
    try:
        return float(check_ttl(float(text)) or 0.0)
    except (ValueError, InvalidInputError) as exc:
        raise argparse.ArgumentTypeError(f"not a usable number of seconds: {exc}") from None


def _json_object(text: str) -> dict[str, Any]:
    """argparse type: a JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, such as \'{"source": "cli"}\'')
    return value


async def _store(args: argparse.Namespace) -> int:
    value = sys.stdin.read() if args.value == "-" else args.value
    async with open_backend(args.backend) as backend:
        entry = await backend.store(args.user_id, args.key, value, args.metadata, ttl=args.ttl)
    if args.json:
        _print_json(_entry_dict(entry))
    else:
        what = "stored" if entry.created_at == entry.updated_at else "updated"
        print(f"{what} {entry.user_id}/{entry.key}")
    return 0


async def _get(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        entry = await backend.retrieve(args.user_id, args.key)
    if entry is None:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    if args.json:
        _print_json(_entry_dict(entry))
    else:
        print(entry.value)
    return 0


async def _query(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        hits = await backend.query(args.user_id, args.text, args.limit, where=args.where)
    if args.json:
        _print_json([_entry_dict(hit) for hit in hits])
        return 0
    if not hits:
        print("no matching memories", file=sys.stderr)
        return 0
    width = max(len(hit.key) for hit in hits)
    print(f"rank  {'score':>9}  {'key':<{width}}  value")
    for rank, hit in enumerate(hits, 1):
        score = f"{hit.score or 0.0:9.3g}"
        print(f"{rank:>4}  {score}  {hit.key:<{width}}  {_one_line(hit.value)}")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        keys = await backend.list_keys(
            args.user_id, where=args.where, limit=args.limit, offset=args.offset
        )
    if args.json:
        _print_json(keys)
    else:
        for key in keys:
            print(key)
    return 0


async def _history(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        versions = await backend.history(args.user_id, args.key, args.limit)
    if not versions:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    if args.json:
        _print_json([_entry_dict(version) for version in versions])
        return 0
    for version in versions:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(version.updated_at))
        print(f"{when}  {_one_line(version.value)}")
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        deleted = await backend.delete(args.user_id, args.key)
    if args.json:
        _print_json({"deleted": deleted})
    elif deleted:
        print(f"deleted {args.user_id}/{args.key}")
    if not deleted:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    return 0


async def _forget(args: argparse.Namespace) -> int:
    async with open_backend(args.backend) as backend:
        count = await backend.forget_user(args.user_id)
    if args.json:
        _print_json({"deleted_count": count})
    else:
        print(f"forgot {count} memories of {args.user_id}")
    return 0


def _sql_backend(spec: str | None, command: str) -> SQLBackend:
    backend = open_backend(spec)
    if not isinstance(backend, SQLBackend):
        raise _Failed(f"{command} works on a SQL store (sqlite or postgresql URL), not {spec!r}")
    return backend


async def _export(args: argparse.Namespace) -> int:
    """Write memories as JSON lines, oldest first, with their timestamps, for ``import``."""
    count = 0
    async with _sql_backend(args.backend, "export") as backend:
        with _output(args.output) as out:
            async for entry in backend.scan(args.user):
                out.write(_jsonl(_entry_dict(entry)))
                count += 1
    summary = {"exported": count, "output": args.output or "-"}
    if args.json:
        print(json.dumps(summary), file=sys.stdout if args.output else sys.stderr)
    else:
        print(f"exported {count} memories", file=sys.stdout if args.output else sys.stderr)
    return 0


class _output:
    """A file to write, or stdout for ``None``/``-``; a file is replaced only when complete."""

    def __init__(self, path: str | None) -> None:
        self._path = None if path in (None, "-") else Path(path)
        self._file: IO[str] | None = None

    def __enter__(self) -> IO[str]:
        if self._path is None:
            return sys.stdout
        self._partial = self._path.with_name(self._path.name + ".partial")
        try:
            self._file = self._partial.open("w", encoding="utf-8", newline="\n")
        except OSError as exc:
            raise _Failed(f"cannot write {self._path}: {exc.strerror}") from None
        return self._file

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._file is None or self._path is None:
            sys.stdout.flush()
            return
        self._file.close()
        if exc_type is None:
            self._partial.replace(self._path)
        else:
            self._partial.unlink(missing_ok=True)


def _parse_line(line: bytes, number: int, now: float, *, validate: bool = True) -> MemoryEntry:
    """One exported memory, or ``_Failed`` naming the line.

    ``validate=False`` skips the checks of ids, value and metadata, for the second reading
    of a file already validated (``import_entries`` checks them again before writing).
    """
    try:
        data = json.loads(line)
        if not isinstance(data, dict):
            raise InvalidInputError("a line must be a JSON object")
        unknown = sorted(set(data) - set(ENTRY_FIELDS))
        if unknown:
            raise InvalidInputError(
                f"unknown field {unknown[0]!r}; a line has {', '.join(ENTRY_FIELDS)}"
            )
        missing = [name for name in ("user_id", "key", "value") if name not in data]
        if missing:
            raise InvalidInputError(f"missing field {missing[0]!r}")
        stamps = []
        for name in ("created_at", "updated_at"):
            stamp = data.get(name, now)
            if isinstance(stamp, bool) or not isinstance(stamp, int | float):
                raise InvalidInputError(f"{name} must be a number of unix seconds")
            if not math.isfinite(stamp):
                raise InvalidInputError(f"{name} must be finite")
            stamps.append(float(stamp))
        expires_at = data.get("expires_at")
        if expires_at is not None and (
            isinstance(expires_at, bool)
            or not isinstance(expires_at, int | float)
            or not math.isfinite(expires_at)
        ):
            raise InvalidInputError("expires_at must be a number of unix seconds or null")
        if not validate:
            return MemoryEntry(
                data["user_id"],
                data["key"],
                data["value"],
                data.get("metadata", {}),
                stamps[0],
                stamps[1],
                expires_at=expires_at,
            )
        return MemoryEntry(
            user_id=check_id("user_id", data["user_id"]),
            key=check_id("key", data["key"]),
            value=check_value(data["value"]),
            metadata=check_metadata(data.get("metadata")),
            created_at=stamps[0],
            updated_at=stamps[1],
            expires_at=None if expires_at is None else float(expires_at),
        )
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        if isinstance(exc, UnicodeDecodeError):
            reason = "not UTF-8"
        outcome = (
            "nothing was imported"
            if validate
            else "the input changed during the import; earlier batches were written"
        )
        raise _Failed(f"line {number}: {reason}; {outcome}") from None


def _entries(source: IO[bytes], now: float, *, validate: bool = True) -> Iterator[MemoryEntry]:
    for number, line in enumerate(source, 1):
        if line.strip():
            yield _parse_line(line, number, now, validate=validate)


def _batches(entries: Iterator[MemoryEntry], size: int) -> Iterator[list[MemoryEntry]]:
    batch: list[MemoryEntry] = []
    for entry in entries:
        batch.append(entry)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _import(args: argparse.Namespace) -> int:
    """Read JSON lines (as ``export`` writes them) and upsert them with their timestamps.

    The whole input is validated first, so a bad line writes nothing; then it is written in
    batches of ``--batch-size``, one transaction each. Importing the same file twice leaves
    the store as after the first time (lines without timestamps get the time of the import).
    """
    started = time.perf_counter()
    now = time.time()
    with tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) as spool:
        if args.input == "-":
            while chunk := sys.stdin.buffer.read(1024 * 1024):
                spool.write(chunk)
            spool.seek(0)
            total = sum(1 for _ in _entries(spool, now))
            spool.seek(0)
            written, batches = asyncio.run(_write(args, spool, now, total))
        else:
            try:
                opened = Path(args.input).open("rb")  # noqa: SIM115 - closed by the with below
            except OSError as exc:
                raise _Failed(f"cannot read {args.input}: {exc.strerror}") from None
            with opened as source:
                total = sum(1 for _ in _entries(source, now))
                source.seek(0)
                written, batches = asyncio.run(_write(args, source, now, total))
    seconds = time.perf_counter() - started
    summary = {"lines": total, "imported": written, "batches": batches, "seconds": seconds}
    if args.json:
        _print_json(summary)
    else:
        print(
            f"imported {written} memories from {total} lines in {batches} batches ({seconds:.2f} s)"
        )
    return 0


async def _write(
    args: argparse.Namespace, source: IO[bytes], now: float, total: int
) -> tuple[int, int]:
    """Upsert the validated ``source`` batch by batch, with a progress bar on a terminal."""
    from tqdm import tqdm

    written = batches = 0
    chunks = _batches(_entries(source, now, validate=False), args.batch_size)
    async with _sql_backend(args.backend, "import") as backend:
        with tqdm(total=total, unit="mem", file=sys.stderr, disable=None, desc="import") as bar:
            while True:
                batch: list[MemoryEntry] = await asyncio.to_thread(next, chunks, [])
                if not batch:
                    break
                written += await backend.import_entries(batch)
                batches += 1
                bar.update(len(batch))
    return written, batches


def _mcp(args: argparse.Namespace) -> int:
    try:
        from asyncmem.mcp_server import serve
    except ImportError:
        raise _Failed("the MCP server needs the mcp package: pip install 'asyncmem[mcp]'") from None
    served = {"user_id": args.user, "admin": args.admin, "http": args.http}
    asyncio.run(serve(open_backend(args.backend), **served))
    return 0


_DATA_COMMANDS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "store": _store,
    "get": _get,
    "history": _history,
    "query": _query,
    "list": _list,
    "delete": _delete,
    "forget": _forget,
    "export": _export,
}


def _add_data_commands(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--backend", help="null, sqlite or a database URL (default: ASYNCMEM_URL or the file)"
    )
    common.add_argument("--json", action="store_true", help="print the result as JSON")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, help=help, parents=[common])
        return parser

    store = command("store", "store (or overwrite) one memory")
    store.add_argument("user_id", type=_id)
    store.add_argument("key", type=_id)
    store.add_argument("value", help="the memory's text; - reads it from stdin")
    store.add_argument("--metadata", type=_json_object, help="a JSON object stored alongside")
    store.add_argument("--ttl", type=_seconds, help="forget it after this many seconds")

    get = command("get", "print one memory's value (exit 1 when there is none)")
    get.add_argument("user_id", type=_id)
    get.add_argument("key", type=_id)

    query = command("query", "memories of a user ranked by relevance to a question")
    query.add_argument("user_id", type=_id)
    query.add_argument("text")
    query.add_argument(
        "--limit", type=_count(1, MAX_LIMIT), default=10, help="at most this many (default 10)"
    )
    query.add_argument("--where", type=_json_object, help=_WHERE_HELP)

    listing = command("list", "a user's keys, most recently updated first")
    listing.add_argument("user_id", type=_id)
    listing.add_argument("--where", type=_json_object, help=_WHERE_HELP)
    listing.add_argument("--limit", type=_count(1, MAX_PAGE_SIZE), help="at most this many keys")
    listing.add_argument("--offset", type=_count(0, 10**12), default=0, help="skip this many")

    history = command("history", "a memory's kept versions, newest first")
    history.add_argument("user_id", type=_id)
    history.add_argument("key", type=_id)
    history.add_argument(
        "--limit", type=_count(1, MAX_LIMIT), default=10, help="at most this many (default 10)"
    )

    delete = command("delete", "delete one memory (exit 1 when there was none)")
    delete.add_argument("user_id", type=_id)
    delete.add_argument("key", type=_id)

    forget = command("forget", "erase every memory of a user")
    forget.add_argument("user_id", type=_id)

    export = command("export", "write memories as JSON lines (SQL stores)")
    export.add_argument("--user", type=_id, help="only this user's memories (default: everyone's)")
    export.add_argument("-o", "--output", help="file to write (default: stdout)")

    load = command("import", "read JSON lines from export and upsert them (SQL stores)")
    load.add_argument("input", help="a JSONL file; - reads stdin")
    load.add_argument(
        "--batch-size",
        type=_count(1, MAX_IMPORT_BATCH),
        default=IMPORT_BATCH,
        help="lines per transaction",
    )

    mcp = sub.add_parser("mcp", help="serve the memory tool to MCP clients over stdio")
    mcp.add_argument("--backend", help="null, sqlite or a database URL")
    mcp.add_argument(
        "--user", type=_id, help="serve only this user's memories (user_id is then implied)"
    )
    mcp.add_argument("--admin", action="store_true", help="also serve purge and evaluate")
    mcp.add_argument("--http", metavar="[HOST:]PORT", help="streamable HTTP on loopback, not stdio")


def _eval(args: argparse.Namespace) -> int:
    """Evaluate backends: null and a scratch SQLite file by default, Honcho when configured."""
    import contextlib
    import os
    import time
    from typing import cast

    from asyncmem.backend import MemoryBackend
    from asyncmem.evaluation import EvaluationReport, Workload, evaluate, write_chart
    from asyncmem.evaluation.report import BackendResult

    if args.size < 1 or args.concurrency < 1:
        print("asyncmem eval: error: --size and --concurrency must be at least 1", file=sys.stderr)
        return 2
    specs = list(args.backend or ["null", "sqlite"])
    if not args.backend and (os.environ.get("HONCHO_URL") or os.environ.get("HONCHO_BASE_URL")):
        specs.append("honcho?")
    workload = Workload(
        size=args.size,
        repetitions=min(300, args.size),
        concurrent_operations=min(2000, args.size),
        concurrency=args.concurrency,
        dataset=args.dataset,
    )
    tty = sys.stderr.isatty()
    shown: dict[str, str] = {}

    def progress(name: str, phase: str, done: int, total: int) -> None:
        if tty:
            filled = int(24 * done / max(total, 1))
            bar = "#" * filled + "." * (24 - filled)
            print(f"\r{name:<14} {phase:<12} [{bar}] {done}/{total}  ", end="", file=sys.stderr)
        elif shown.get(name) != phase:
            shown[name] = phase
            print(f"{name}: {phase} ...", file=sys.stderr)

    async def run() -> EvaluationReport:
        with tempfile.TemporaryDirectory(prefix="asyncmem-eval-") as scratch:
            async with contextlib.AsyncExitStack() as stack:
                backends: list[MemoryBackend] = []
                for spec in specs:
                    optional = spec.endswith("?")
                    spec = spec.rstrip("?")
                    if spec == "sqlite":
                        spec = f"sqlite:///{Path(scratch) / 'eval.db'}"
                    try:
                        backend = open_backend(spec)
                        backends.append(
                            cast(MemoryBackend, await stack.enter_async_context(backend))
                        )
                    except (AsyncmemError, ImportError) as exc:
                        if not optional:
                            raise
                        print(f"skipping {spec}: {exc}", file=sys.stderr)
                return await evaluate(backends, workload=workload, progress=progress)

    started = time.perf_counter()
    report = asyncio.run(run())
    if tty:
        print(file=sys.stderr)
    elapsed = time.perf_counter() - started

    def cell(result: BackendResult, op: str) -> str:
        stats = result.latency.get(op)
        return "-" if stats is None else f"{stats.p50_ms:.2f}/{stats.p99_ms:.2f}"

    header = (
        "backend",
        "score",
        "checks",
        "store ms",
        "retrieve ms",
        "query ms",
        f"{workload.concurrency}-task ops/s",
        "recall@10",
        "MRR@10",
        "data",
    )
    rows: list[tuple[str, ...]] = [header]
    for r in report.results:
        rows.append(
            (
                r.name,
                f"{r.score.total:.1f}",
                f"{r.checks_passed}/{len(r.checks)}",
                cell(r, "store"),
                cell(r, "retrieve"),
                cell(r, "query"),
                "-" if r.concurrency is None else f"{r.concurrency.ops_per_s:,.0f}",
                "-" if r.relevance is None else f"{r.relevance.recall_at_10:.3f}",
                "-" if r.relevance is None else f"{r.relevance.mrr_at_10:.3f}",
                "leaves machine" if r.privacy.leaves_machine else "local",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for number, row in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if number == 0:
            print("  ".join("-" * w for w in widths))
    print("(latency columns: p50/p99 over one call at a time)")
    for r in report.results:
        if r.relevance is not None and r.relevance.recall_at_10 > 0:
            v = r.relevance
            print(
                f"{r.name} relevance on {v.dataset} ({v.queries} questions): recall@1 "
                f"{v.recall_at_1:.3f}, recall@5 {v.recall_at_5:.3f}, recall@10 "
                f"{v.recall_at_10:.3f}, MRR@10 {v.mrr_at_10:.3f}"
            )
        for error in r.errors:
            print(f"{r.name}: {error}")
    print(report.recommendation)
    print(f"evaluated {len(report.results)} backend(s) in {elapsed:.1f} s")
    if args.json:
        Path(args.json).write_text(report.to_json() + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(report.to_markdown(), encoding="utf-8")
    if args.chart:
        try:
            write_chart(report, args.chart)
        except ImportError as exc:
            print(f"asyncmem: error: {exc}", file=sys.stderr)
            return 1
        print(f"chart: {args.chart}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncmem", description=__doc__)
    parser.add_argument("--version", action="version", version=asyncmem.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="show the configured backend and versions")
    info.add_argument("--backend", help="null, sqlite or a database URL")
    info.add_argument("--json", action="store_true", help="JSON output (the default)")

    demo = sub.add_parser("demo", help="store a few memories in a scratch store and query them")
    demo.add_argument("--backend", help="null or a database URL (default: a temporary file)")

    ev = sub.add_parser("eval", help="compare backends: latency, relevance, privacy, score")
    ev.add_argument(
        "--backend",
        action="append",
        help="null, sqlite (a temporary file), honcho or a database URL; repeatable "
        "(default: null and sqlite, plus honcho when HONCHO_URL is set)",
    )
    ev.add_argument(
        "--size",
        type=int,
        default=2000,
        help="memories in the timed set (default 2000; a smaller set also times fewer calls)",
    )
    ev.add_argument("--concurrency", type=int, default=32, help="concurrent tasks")
    ev.add_argument("--dataset", help="your own labelled JSON/JSONL set (default: the shipped one)")
    ev.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    ev.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    ev.add_argument("--chart", metavar="PATH", help="draw a PNG chart (needs asyncmem[chart])")

    db = sub.add_parser("db", help="manage the SQL schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current", "check", "purge"])
    db.add_argument("revision", nargs="?", help="target revision (default: head / base)")
    db.add_argument(
        "--url",
        "--backend",
        dest="url",
        help="database URL (default: ASYNCMEM_URL or the embedded file)",
    )
    db.add_argument("--json", action="store_true", help="print the result as JSON")

    _add_data_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 not found or failed, 2 usage)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command in _DATA_COMMANDS:
            return asyncio.run(_DATA_COMMANDS[args.command](args))
        if args.command == "import":
            return _import(args)
        if args.command == "mcp":
            return _mcp(args)
        if args.command == "info":
            return _info(args)
        if args.command == "demo":
            return asyncio.run(_demo(args))
        if args.command == "eval":
            return _eval(args)
        if args.command == "db":
            if args.url is None:
                args.url = open_backend_url()
            return asyncio.run(_db(args))
    except _Failed as exc:
        print(f"asyncmem: error: {exc}", file=sys.stderr)
        return 1
    except AsyncmemError as exc:
        print(f"asyncmem: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("asyncmem: interrupted", file=sys.stderr)
        return 130
    return 2  # pragma: no cover - argparse rejects unknown commands first


def open_backend_url() -> str | None:
    """The URL the environment names, for commands that work on the database itself."""
    return os.environ.get("ASYNCMEM_URL") or None
