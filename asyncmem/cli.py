"""The ``asyncmem`` command: small functions over the public API, one per subcommand.

Each subcommand imports what it needs when it runs, so a quick one such as ``asyncmem get``
pays for neither Alembic, the evaluator nor the export format. Stored text is printed with
its control characters escaped (a stored escape sequence never reaches the terminal), except
``get``'s value when the output is not a terminal, which is written exactly as stored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import unicodedata
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from asyncmem.backend import MAX_LIMIT, MAX_PAGE_SIZE, check_id, check_ttl
from asyncmem.errors import AsyncmemError, InvalidInputError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from asyncmem.backend import MemoryEntry
    from asyncmem.sql.store import SQLBackend

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
IMPORT_BATCH = 500
"""Lines ``asyncmem import`` writes per transaction unless ``--batch-size`` says otherwise."""


class _Failed(Exception):
    """A command failed in a way its message explains (exit code 1)."""


# --- printing ---------------------------------------------------------------------------------


def _safe(text: str, keep: str = "") -> str:
    """``text`` with control, format and line-separator characters as visible escapes.

    Escape sequences, bidirectional overrides and the like in stored text would otherwise act
    on the terminal. Characters in ``keep`` (say, ``"\\n\\t"``) are left alone.
    """
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch in keep or not (unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029")
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def _one_line(text: str, width: int = 100) -> str:
    flat = _safe(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def _print_json(data: object) -> None:
    from asyncmem.export import dumps

    print(dumps(data, indent=2))


def _entry_json(entry: MemoryEntry) -> dict[str, Any]:
    from asyncmem.export import entry_to_dict

    return entry_to_dict(entry)


# --- argument types (a bad argument is a usage error, exit code 2) ----------------------------


def _id(text: str) -> str:
    """A user id or key."""
    try:
        return check_id("it", text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("it ")) from None


def _count(low: int, high: int | Callable[[], int]) -> Callable[[str], int]:
    """An int from ``low`` to ``high`` (a callable when the bound needs a heavy import)."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        top = high if isinstance(high, int) else high()
        if not low <= number <= top:
            raise argparse.ArgumentTypeError(f"must be between {low} and {top}")
        return number

    return parse


def _import_batch_limit() -> int:
    from asyncmem.sql.store import MAX_IMPORT_BATCH

    return MAX_IMPORT_BATCH


def _seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        return float(check_ttl(float(text)) or 0.0)
    except (ValueError, InvalidInputError) as exc:
        raise argparse.ArgumentTypeError(f"not a usable number of seconds: {exc}") from None


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("nested too deeply") from None
    except ValueError:  # an int with more digits than Python converts
        raise argparse.ArgumentTypeError("not usable JSON (a number too long)") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, such as \'{"source": "cli"}\'')
    return value


_WHERE_HELP = (
    'only memories whose metadata matches, e.g. \'{"topic": "work"}\' or \'{"n": {"$gte": 2}}\''
)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line that points at ``--help``."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``, reading the installed version only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        import asyncmem

        parser.exit(message=f"{asyncmem.__version__}\n")


# --- commands ---------------------------------------------------------------------------------


def _open(spec: str | None) -> Any:
    from asyncmem.config import open_backend

    return open_backend(spec)


def _shown_url(url: URL) -> str:
    """``url`` for people: password hidden, a SQLite file's path absolute, ``~`` expanded."""
    from asyncmem.sql.engine import sqlite_path

    path = sqlite_path(url)
    if path is not None:
        url = url.set(database=os.path.abspath(path))
    return url.render_as_string(hide_password=True)


def _sql_backend(spec: str | None, command: str) -> SQLBackend:
    from asyncmem.sql.store import SQLBackend

    backend = _open(spec)
    if not isinstance(backend, SQLBackend):
        raise _Failed(f"{command} works on a SQL store (sqlite or postgresql URL), not {spec!r}")
    return backend


def _info(args: argparse.Namespace) -> int:
    import asyncmem
    from asyncmem.sql import migrate
    from asyncmem.sql.engine import default_path, normalize_url
    from asyncmem.sql.store import SQLBackend

    backend = _open(args.backend)
    details: dict[str, Any] = {
        "version": asyncmem.__version__,
        "backend": backend.backend_name,
        "is_cloud": backend.is_cloud,
        "default_path": str(default_path()),
    }
    if isinstance(backend, SQLBackend):
        details["url"] = backend.url
        if backend.path is not None:
            details["path"] = os.path.abspath(backend.path)
            details["url"] = _shown_url(normalize_url(backend.url))
        details["schema_head"] = migrate.HEAD
    _print_json(details)
    return 0


async def _demo(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        spec = args.backend or f"sqlite:///{Path(scratch) / 'demo.db'}"
        async with _open(spec) as backend:
            print(f"backend: {backend.backend_name}")
            user = "asyncmem-demo"
            for key, value in DEMO_MEMORIES:
                await backend.store(user, key, value, {"source": "demo"})
            print(f"stored {_plural(len(DEMO_MEMORIES), 'memory', 'memories')} for {user!r}\n")
            for question in DEMO_QUESTIONS:
                print(f"? {question}")
                for rank, hit in enumerate(await backend.query(user, question, limit=3), 1):
                    print(f"  {rank}. [{hit.key}] {hit.value}  (score {hit.score:.3f})")
            await backend.forget_user(user)
    return 0


async def _db(args: argparse.Namespace) -> int:
    from asyncmem.sql import migrate
    from asyncmem.sql.engine import normalize_url

    url = normalize_url(args.url or os.environ.get("ASYNCMEM_URL") or None)
    database = _shown_url(url)
    if args.action in {"purge", "compact"}:
        from asyncmem.sql.store import SQLBackend

        async with SQLBackend(url) as backend:
            if args.action == "compact":
                await backend.compact()
                print(f"compacted {database}: no word of a deleted memory is left in its files")
                return 0
            purged = await backend.purge_expired()
        print(f"purged {_plural(purged, 'expired memory', 'expired memories')} from {database}")
        return 0
    operation = f"db {args.action}"
    async with migrate.migration_engine(
        url, create=args.action == "upgrade", operation=operation
    ) as engine:
        if args.action == "check":
            await migrate.check(engine)
        elif args.action == "upgrade":
            await migrate.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            await migrate.downgrade(engine, args.revision or "base")
        revisions = await migrate.current(engine)
    head = migrate.HEAD
    if args.json:
        _print_json({"database": database, "revisions": list(revisions), "head": head})
        return 0
    print(f"database: {database}")
    print(f"revision: {', '.join(revisions) or 'none'} (head: {head})")
    if args.action == "check":
        print("schema: matches the models (no drift)")
    return 0


async def _store(args: argparse.Namespace) -> int:
    value = sys.stdin.read() if args.value == "-" else args.value
    async with _open(args.backend) as backend:
        entry = await backend.store(args.user_id, args.key, value, args.metadata, ttl=args.ttl)
    if args.json:
        _print_json(_entry_json(entry))
    else:
        what = "stored" if entry.created_at == entry.updated_at else "updated"
        print(f"{what} {_safe(entry.user_id)}/{_safe(entry.key)}")
    return 0


async def _get(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        entry = await backend.retrieve(args.user_id, args.key)
    if entry is None:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    if args.json:
        _print_json(_entry_json(entry))
    elif sys.stdout.isatty():
        print(_safe(entry.value, keep="\n\t"))
    else:
        print(entry.value)
    return 0


async def _query(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        hits = await backend.query(args.user_id, args.text, args.limit, where=args.where)
    if args.json:
        _print_json([_entry_json(hit) for hit in hits])
        return 0
    if not hits:
        print("no matching memories", file=sys.stderr)
        return 0
    keys = [_safe(hit.key) for hit in hits]
    width = max(len(key) for key in keys)
    print(f"rank  {'score':>6}  {'key':<{width}}  value")
    for rank, (hit, key) in enumerate(zip(hits, keys, strict=True), 1):
        print(f"{rank:>4}  {hit.score or 0.0:6.3f}  {key:<{width}}  {_one_line(hit.value)}")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        keys = await backend.list_keys(
            args.user_id, where=args.where, limit=args.limit, offset=args.offset
        )
    if args.json:
        _print_json(keys)
    else:
        for key in keys:
            print(_safe(key))
    return 0


async def _history(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        versions = await backend.history(args.user_id, args.key, args.limit)
    if not versions:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    if args.json:
        _print_json([_entry_json(version) for version in versions])
        return 0
    for version in versions:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(version.updated_at))
        print(f"{when}  {_one_line(version.value)}")
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        deleted = await backend.delete(args.user_id, args.key)
    if args.json:
        _print_json({"deleted": deleted})
    elif deleted:
        print(f"deleted {_safe(args.user_id)}/{_safe(args.key)}")
    if not deleted:
        raise _Failed(f"no memory {args.key!r} for user {args.user_id!r}")
    return 0


async def _forget(args: argparse.Namespace) -> int:
    async with _open(args.backend) as backend:
        count = await backend.forget_user(args.user_id)
    if args.json:
        _print_json({"deleted_count": count})
    else:
        print(f"forgot {_plural(count, 'memory', 'memories')} of {_safe(args.user_id)}")
    return 0


async def _export(args: argparse.Namespace) -> int:
    """Write memories as JSON lines, oldest first, with their timestamps, for ``import``."""
    from asyncmem.export import ExportFile, export_entries

    output = args.output or "-"
    async with _sql_backend(args.backend, "export") as backend:
        try:
            with ExportFile(output) as out:
                count = await export_entries(backend.scan(args.user), out)
        except OSError as exc:
            raise _Failed(f"cannot write {output}: {exc.strerror or exc}") from None
    report = sys.stderr if output == "-" else sys.stdout
    if args.json:
        print(json.dumps({"exported": count, "output": output}), file=report)
    else:
        print(f"exported {_plural(count, 'memory', 'memories')}", file=report)
    return 0


def _import(args: argparse.Namespace) -> int:
    """Read JSON lines (as ``export`` writes them) and upsert them with their timestamps.

    The whole input is checked first, so a bad line writes nothing; then it is written in
    batches of ``--batch-size``, one transaction each. Importing the same file twice leaves
    the store as after the first time (lines without timestamps get the time of the import).
    """
    import contextlib
    import shutil
    import tempfile

    from asyncmem.export import LineError, count_lines

    started = time.perf_counter()
    now = time.time()
    with contextlib.ExitStack() as stack:
        try:
            given = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
        except OSError as exc:
            raise _Failed(f"cannot read {args.input}: {exc.strerror}") from None
        if given is not sys.stdin.buffer:
            stack.enter_context(given)
        source: Any = given
        if not given.seekable():  # stdin, a pipe: read twice from a copy
            source = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024))
            shutil.copyfileobj(given, source, 1024 * 1024)
            source.seek(0)
        try:
            total = count_lines(source, now)
        except LineError as exc:
            raise _Failed(f"{exc}; nothing was imported") from None
        source.seek(0)
        written, batches = asyncio.run(_write(args, source, now, total))
    seconds = time.perf_counter() - started
    if args.json:
        summary = {"lines": total, "imported": written, "batches": batches, "seconds": seconds}
        _print_json(summary)
    else:
        print(
            f"imported {_plural(written, 'memory', 'memories')} from {_plural(total, 'line')} "
            f"in {_plural(batches, 'batch', 'batches')} ({seconds:.2f} s)"
        )
    return 0


async def _write(args: argparse.Namespace, source: Any, now: float, total: int) -> tuple[int, int]:
    """Upsert the checked ``source``, with a progress bar on a terminal."""
    from tqdm import tqdm

    from asyncmem.export import import_lines

    async with _sql_backend(args.backend, "import") as backend:
        with tqdm(total=total, unit="mem", file=sys.stderr, disable=None, desc="import") as bar:
            return await import_lines(
                backend, source, now, batch_size=args.batch_size, progress=bar.update
            )


def _mcp(args: argparse.Namespace) -> int:
    try:
        from asyncmem.mcp_server import serve
    except ImportError:
        raise _Failed("the MCP server needs the mcp package: pip install 'asyncmem[mcp]'") from None
    served = {"user_id": args.user, "admin": args.admin, "http": args.http}
    asyncio.run(serve(_open(args.backend), **served))
    return 0


def _eval(args: argparse.Namespace) -> int:
    """Evaluate backends: null and a scratch SQLite file by default, Honcho when configured."""
    if args.size < 1 or args.concurrency < 1:
        print("asyncmem eval: error: --size and --concurrency must be at least 1", file=sys.stderr)
        return 2
    from pathlib import Path

    from asyncmem.evaluation.report import check_chart, to_text

    for output in (args.json, args.markdown, args.chart):
        if output and not Path(output).parent.is_dir():
            raise _Failed(f"cannot write {output}: no such directory")
    if args.chart:
        try:
            check_chart()
        except ImportError as exc:
            raise _Failed(str(exc)) from None
    specs = list(args.backend or ["null", "sqlite"])
    if not args.backend and (os.environ.get("HONCHO_URL") or os.environ.get("HONCHO_BASE_URL")):
        specs.append("honcho?")
    started = time.perf_counter()
    report = asyncio.run(_evaluate(specs, args))
    elapsed = time.perf_counter() - started
    print(to_text(report))
    print(f"evaluated {_plural(len(report.results), 'backend')} in {elapsed:.1f} s")
    if args.json:
        Path(args.json).write_text(report.to_json() + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(report.to_markdown(), encoding="utf-8")
    if args.chart:
        from asyncmem.evaluation.report import write_chart

        write_chart(report, args.chart)
        print(f"chart: {args.chart}")
    return 0


async def _evaluate(specs: list[str], args: argparse.Namespace) -> Any:
    """Open each backend of ``specs`` (``sqlite`` is a scratch file) and evaluate them."""
    import contextlib
    import tempfile
    from pathlib import Path

    from asyncmem.evaluation import Workload, evaluate

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

    with tempfile.TemporaryDirectory(prefix="asyncmem-eval-") as scratch:
        async with contextlib.AsyncExitStack() as stack:
            backends = []
            for given in specs:
                optional = given.endswith("?")
                spec = given.rstrip("?")
                if spec == "sqlite":
                    spec = f"sqlite:///{Path(scratch) / 'eval.db'}"
                try:
                    backends.append(await stack.enter_async_context(_open(spec)))
                except (AsyncmemError, ImportError) as exc:
                    if not optional:
                        raise
                    print(f"skipping {spec}: {exc}", file=sys.stderr)
            report = await evaluate(backends, workload=workload, progress=progress)
    if tty:
        print(file=sys.stderr)
    return report


_DATA_COMMANDS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "store": _store,
    "get": _get,
    "history": _history,
    "query": _query,
    "list": _list,
    "delete": _delete,
    "forget": _forget,
    "export": _export,
    "demo": _demo,
    "db": _db,
}
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "import": _import,
    "mcp": _mcp,
    "info": _info,
    "eval": _eval,
}


# --- the parser -------------------------------------------------------------------------------


def _add_backend(parser: argparse.ArgumentParser, help: str) -> None:
    """The store a command works on: ``--backend``, or ``--url`` as on ``db``."""
    parser.add_argument("--backend", "--url", dest="backend", help=help)


def _add_data_commands(sub: Any) -> None:
    common = _Parser(add_help=False)
    _add_backend(common, "null, sqlite or a database URL (default: ASYNCMEM_URL or the file)")
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
    export.add_argument(
        "-o", "--output", help="file to write, created 0600 (default, or -: stdout)"
    )

    load = command("import", "read JSON lines from export and upsert them (SQL stores)")
    load.add_argument("input", help="a JSONL file; - reads stdin")
    load.add_argument(
        "--batch-size",
        type=_count(1, _import_batch_limit),
        default=IMPORT_BATCH,
        help="lines per transaction",
    )

    mcp = sub.add_parser("mcp", help="serve the memory tool to MCP clients over stdio")
    _add_backend(mcp, "null, sqlite or a database URL")
    mcp.add_argument(
        "--user", type=_id, help="serve only this user's memories (user_id is then implied)"
    )
    mcp.add_argument("--admin", action="store_true", help="also serve purge and evaluate")
    mcp.add_argument("--http", metavar="[HOST:]PORT", help="streamable HTTP on loopback, not stdio")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="asyncmem", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="show the configured backend and versions")
    _add_backend(info, "null, sqlite or a database URL")
    info.add_argument("--json", action="store_true", help="JSON output (the default)")

    demo = sub.add_parser("demo", help="store a few memories in a scratch store and query them")
    _add_backend(demo, "null or a database URL (default: a temporary file)")

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
    db.add_argument(
        "action", choices=["upgrade", "downgrade", "current", "check", "purge", "compact"]
    )
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
    """Run the CLI; returns the exit code (0 ok, 1 not found or failed, 2 usage).

    Every error is one line on stderr: ``asyncmem: error: ...``.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command in _DATA_COMMANDS:
            return asyncio.run(_DATA_COMMANDS[args.command](args))
        return _COMMANDS[args.command](args)
    except (_Failed, AsyncmemError) as exc:
        message = " ".join(str(exc).split())
        print(f"asyncmem: error: {_safe(message)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"asyncmem: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("asyncmem: interrupted", file=sys.stderr)
        return 130
