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
    "NAMING_CONVENTION",
    "Base",
    "Memory",
    "MemoryVersion",
    "SearchRecent",
    "SearchTerm",
    "SearchUser",
    "Setting",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


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
    """Neighbour turns' terms (same user and session, store order), JSON ``{term: weight}``,
    searched at a low weight."""
    facets: Mapped[str] = mapped_column(Text, server_default="")
    """Speaker and date words from the metadata, searched in their own field."""
    words: Mapped[str] = mapped_column(Text, server_default="")
    """The memory's own index terms, JSON ``{term: weight}`` (see :mod:`asyncmem.sql.terms`)."""
    length: Mapped[int] = mapped_column(Integer, server_default="0")
    """The memory's own word count: BM25's document length, with its context's terms."""

    __table_args__ = (
        UniqueConstraint("user_id", "key"),
        Index(None, "user_id", "updated_at"),
        Index(None, "expires_at"),
        # Partial: a query leaves out the user's expired memories by this range.
        Index(
            None,
            "user_id",
            "expires_at",
            sqlite_where=text("expires_at IS NOT NULL"),
            postgresql_where=text("expires_at IS NOT NULL"),
        ),
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


_ID = BigInteger().with_variant(Integer(), "sqlite")


class SearchUser(Base):
    """A user of the search index: a small number for the postings, and BM25's statistics
    (documents, their total length), kept by triggers on ``memories``."""

    __tablename__ = "search_users"

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(MAX_ID_LENGTH), unique=True)
    documents: Mapped[int] = mapped_column(BigInteger)
    length: Mapped[int] = mapped_column(BigInteger)
    recent: Mapped[int] = mapped_column(Integer, server_default="0")
    """SQLite: memories written since the user's :class:`SearchRecent` postings were last
    merged into :class:`SearchTerm` (at :data:`asyncmem.sql.terms.MERGE_AFTER`)."""


class SearchTerm(Base):
    """One posting: a term of one user's memory, its weight (tenths) and the memory's length.

    Keyed user first, so a question reads only its user's postings of its own terms.
    Written only by the triggers on ``memories``.
    """

    __tablename__ = "search_terms"

    owner: Mapped[int] = mapped_column(_ID, primary_key=True)
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    memory_id: Mapped[int] = mapped_column(_ID, primary_key=True)
    weight: Mapped[int] = mapped_column(Integer)
    length: Mapped[int] = mapped_column(Integer)

    # A memory's postings by the memory, for its delete: memory ids grow, so the index is
    # written at its end.
    __table_args__ = (Index(None, "memory_id"), {"sqlite_with_rowid": False})


class SearchRecent(Base):
    """SQLite: the postings of a user's latest writes, keyed memory first.

    A write's postings are rows with neighbouring keys here, so its commit writes a page or
    two; keyed term first (:class:`SearchTerm`), each of a memory's terms lands on a page of
    its own, and each commit copied dozens of pages to the WAL (573 against 62 µs a memory of
    150 words, measured). Every 64 writes of a user (revision 0006's ``MERGE_AFTER``), a
    trigger moves the user's rows into :class:`SearchTerm` in term order, one pass.
    A question reads both; a posting is in exactly one of them.
    """

    __tablename__ = "search_recent"

    owner: Mapped[int] = mapped_column(_ID, primary_key=True)
    memory_id: Mapped[int] = mapped_column(_ID, primary_key=True)
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    weight: Mapped[int] = mapped_column(Integer)
    length: Mapped[int] = mapped_column(Integer)

    __table_args__ = ({"sqlite_with_rowid": False},)
