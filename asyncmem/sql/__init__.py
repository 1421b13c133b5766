"""The SQL store: SQLAlchemy over SQLite (aiosqlite) or PostgreSQL (asyncpg)."""

from asyncmem.sql.store import SQLBackend

__all__ = ["SQLBackend"]
