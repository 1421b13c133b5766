"""The ORM mapping: the schema's source of truth. Alembic migrations are checked against it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from asyncmem.backend import MAX_ID_LENGTH

__all__ = [
    "FTS_TABLE",
    "NAMING_CONVENTION",
    "TSVECTOR_COLUMN",
    "Base",
    "Memory",
    "MemoryVersion",
    "Setting",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

FTS_TABLE = "memories_fts"
"""SQLite: the FTS5 index over key, value, context and facets, kept in sync by triggers
(not ORM-mapped)."""
TSVECTOR_COLUMN = "search_vector"
"""PostgreSQL: the generated ``tsvector`` column behind a GIN index (not ORM-mapped)."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Memory(Base):
    """One memory: a user's value under a key, with JSON metadata."""

    __tablename__ = "memories"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    user_id: Mapped[str] = mapped_column(String(MAX_ID_LENGTH))
    key: Mapped[str] = mapped_column(String(MAX_ID_LENGTH))
    value: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSON().with_variant(JSONB(), "postgresql")
    )
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float | None] = mapped_column(Double)
    session: Mapped[str | None] = mapped_column(Text)
    """``metadata.session`` as JSON text: the conversation this turn belongs to, if any."""
    context: Mapped[str] = mapped_column(Text, server_default="")
    """Neighbour turns' words (same user and session, store order), searched at a low weight."""
    facets: Mapped[str] = mapped_column(Text, server_default="")
    """Speaker and date words from the metadata, searched in their own field."""

    __table_args__ = (
        UniqueConstraint("user_id", "key"),
        Index(None, "user_id", "updated_at"),
        Index(None, "expires_at"),
        # Partial: only turns are looked up by session, and a plain store skips the index.
        Index(
            None,
            "user_id",
            "session",
            "id",
            sqlite_where=text("session IS NOT NULL"),
            postgresql_where=text("session IS NOT NULL"),
        ),
    )


class MemoryVersion(Base):
    """A previous value of a memory, written by a trigger when the memory is stored over.

    The triggers (created in migration 0002) also keep at most ``max_versions - 1`` of them
    per memory and delete them with the memory, so ``store`` and ``delete`` stay one statement.
    """

    __tablename__ = "memory_versions"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    user_id: Mapped[str] = mapped_column(String(MAX_ID_LENGTH))
    key: Mapped[str] = mapped_column(String(MAX_ID_LENGTH))
    value: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column(
        "metadata", JSON().with_variant(JSONB(), "postgresql")
    )
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float | None] = mapped_column(Double)

    __table_args__ = (Index(None, "user_id", "key", "id"),)


class Setting(Base):
    """Store-wide settings the triggers read (``max_versions``)."""

    __tablename__ = "asyncmem_settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
