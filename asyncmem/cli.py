"""The ``asyncmem`` command: small functions over the public API, one per subcommand."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import asyncmem
from asyncmem.backend import MemoryBackend
from asyncmem.config import open_backend
from asyncmem.errors import AsyncmemError
from asyncmem.sql import migrate
from asyncmem.sql.engine import (
    default_path,
    make_engine,
    normalize_url,
    prepare_sqlite_file,
    sqlite_path,
)
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
    path = sqlite_path(url)
    if path is not None and args.action == "upgrade":
        prepare_sqlite_file(path)
    engine = make_engine(url, pooled=False)
    try:
        if args.action == "upgrade":
            await migrate.upgrade(engine, args.revision or "head")
        elif args.action == "downgrade":
            await migrate.downgrade(engine, args.revision or "base")
        revisions = await migrate.current(engine)
    finally:
        await engine.dispose()
    head = migrate.head_revision()
    at = ", ".join(revisions) or "none"
    print(f"database: {url.render_as_string(hide_password=True)}")
    print(f"revision: {at} (head: {head})")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncmem", description=__doc__)
    parser.add_argument("--version", action="version", version=asyncmem.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="show the configured backend and versions")
    info.add_argument("--backend", help="null, sqlite or a database URL")

    demo = sub.add_parser("demo", help="store a few memories in a scratch store and query them")
    demo.add_argument("--backend", help="null or a database URL (default: a temporary file)")

    db = sub.add_parser("db", help="manage the SQL schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "downgrade", "current"])
    db.add_argument("revision", nargs="?", help="target revision (default: head / base)")
    db.add_argument("--url", help="database URL (default: ASYNCMEM_URL or the embedded file)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 failed, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "info":
            return _info(args)
        if args.command == "demo":
            return asyncio.run(_demo(args))
        if args.command == "db":
            if args.url is None:
                args.url = open_backend_url()
            return asyncio.run(_db(args))
    except AsyncmemError as exc:
        print(f"asyncmem: error: {exc}", file=sys.stderr)
        return 1
    return 2  # pragma: no cover - argparse rejects unknown commands first


def open_backend_url() -> str | None:
    """The URL the environment names, for commands that work on the database itself."""
    import os

    return os.environ.get("ASYNCMEM_URL") or None
