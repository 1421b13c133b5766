"""A memory's index terms, as the per-user postings keep them and a question asks. Pure.

Both dialects index the same terms, made here: the words of :func:`~asyncmem.sql.search`'s
splitter, Latin letters folded to their base letter ("café" → "cafe", as FTS5's
``remove_diacritics`` did), stemmed with the Snowball stemmer (PyStemmer's C code). A
memory's ``words`` column holds its own terms as a JSON object ``{term: weight}`` (key and
value at weight 1, speaker, date and CJK facets at :data:`~asyncmem.sql.search.FACET_WEIGHT`),
its ``context`` column its neighbours' distinct terms at
:data:`~asyncmem.sql.search.CONTEXT_WEIGHT`, and ``length`` its own word count (stop words
included, as BM25's document length counts them). Triggers turn those columns into rows of
``search_terms`` (user, term, memory, weight, length; on SQLite the latest writes first in
``search_recent``) and keep each user's document count and total length in
``search_users``, so a question reads only its user's postings of its own terms and BM25's
statistics are the user's own (issue 16).

Weights are stored as integers in tenths (:data:`SCALE`): a posting is then a few bytes.
The splitter, the stemmer and the field weights are part of the stored data: changing one
needs an Alembic revision that rebuilds ``words``, ``context`` and the postings, as 0006 does.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import Stemmer

from asyncmem.sql import search

__all__ = [
    "MAX_TERM_CHARS",
    "MERGE_AFTER",
    "SCALE",
    "STEMMER",
    "index_columns",
    "neighbour_contexts",
    "own_terms",
    "question_terms",
    "term_of",
]

STEMMER = "porter"
"""The Snowball algorithm: Porter's original, the one FTS5's ``porter`` tokenizer ran, so
SQLite's rankings moved least. Snowball's ``english`` (Porter2, PostgreSQL's ``english``
configuration) read frac@10 0.720 against 0.715 and the same MRR@10 (0.503) on the shipped
set of 177 questions; not measured on RealMem."""

SCALE = 10
"""Weights are stored as integers: ``round(weight * SCALE)``."""

MERGE_AFTER = 64
"""SQLite: the write that brings a user's ``search_users.recent`` to this many moves the
user's postings from ``search_recent`` into ``search_terms`` (revision 0006's trigger; a
test reads it from the schema)."""

MAX_TERM_CHARS = 200
"""A longer word is indexed (and asked) by its first this many characters: a PostgreSQL
B-tree entry must stay under a third of a page, and no real word is this long."""


def _scaled(weight: float) -> int:
    scaled = round(weight * SCALE)
    if abs(scaled - weight * SCALE) > 1e-9 or scaled <= 0:
        raise ValueError(f"a field weight must be a positive multiple of 1/{SCALE}: {weight}")
    return scaled


_OWN = _scaled(1.0)
_FACET = _scaled(search.FACET_WEIGHT)
_CONTEXT = _scaled(search.CONTEXT_WEIGHT)

_stem: Callable[[str], str] = Stemmer.Stemmer(STEMMER).stemWord
_CACHE: dict[str, str] = {}
_CACHE_SIZE = 200_000
"""Words whose term is remembered; the cache is emptied when it grows past this."""


@functools.lru_cache(maxsize=4096)
def _fold_char(char: str) -> str:
    """A Latin letter with diacritics → its base letter; any other character as it is."""
    parts = unicodedata.normalize("NFD", char)
    if len(parts) > 1 and parts[0] < "\u0250" and all(map(unicodedata.combining, parts[1:])):
        return parts[0]
    return char


def term_of(word: str) -> str:
    """The index term of one lower-cased word (a word of :func:`search.query_terms`)."""
    term = _CACHE.get(word)
    if term is None:
        short = word[:MAX_TERM_CHARS]
        folded = short if short.isascii() else "".join(map(_fold_char, short))
        term = _stem(folded) if folded.isascii() else folded
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[word] = term
    return term


def question_terms(words: Iterable[str]) -> list[str]:
    """The distinct index terms of a question's words (:func:`search.query_terms`), in order."""
    return list(dict.fromkeys(map(term_of, words)))


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def own_terms(key: str, value: str, facets: str) -> tuple[str, int]:
    """A memory's ``words`` (JSON ``{term: weight in tenths}``) and ``length`` columns."""
    weights: dict[str, int] = {}
    length = 0
    stop = search.STOP_WORDS
    cache = _CACHE
    for text, weight in ((key, _OWN), (value, _OWN), (facets, _FACET)):
        words = list(search.lower_words(text))
        length += len(words)
        for word, count in Counter(words).items():
            if word not in stop:
                term = cache.get(word) or term_of(word)
                weights[term] = weights.get(term, 0) + count * weight
    return (_dumps(weights) if weights else ""), length


def index_columns(key: str, value: str, metadata: Mapping[str, Any]) -> tuple[str, str, int]:
    """A memory's ``facets``, ``words`` and ``length`` columns, as every write stores them."""
    facets = search.facets_of(metadata, value)
    return (facets, *own_terms(key, value, facets))


def _context_json(terms: Iterable[str]) -> str:
    weights = dict.fromkeys(terms, _CONTEXT)
    return _dumps(weights) if weights else ""


@functools.lru_cache(maxsize=search.CONTEXT_CACHE)
def _context_terms(value: str) -> tuple[str, ...]:
    """The distinct terms a turn lends its neighbours' contexts (cached: a conversation's
    tail is read again at each new turn)."""
    stop = search.STOP_WORDS
    words = search.lower_words(value[: search.CONTEXT_CHARS])
    return tuple(dict.fromkeys(term_of(word) for word in words if word not in stop))


def neighbour_contexts(
    values: Sequence[str],
    before: int | None = None,
    after: int | None = None,
    *,
    first: int = 0,
) -> list[str]:
    """The ``context`` column of each turn of one conversation, given its values in store order.

    A turn's context is the distinct terms of up to ``before`` turns before it and ``after``
    turns after it (default :data:`~asyncmem.sql.search.CONTEXT_BEFORE` and
    :data:`~asyncmem.sql.search.CONTEXT_AFTER`), each read to
    :data:`~asyncmem.sql.search.CONTEXT_CHARS`, as JSON ``{term: weight in tenths}`` ("" for
    none). Distinct terms keep the index small (a turn's text is in several contexts) and
    measured as well as the full text on RealMem (frac@10 turns 0.315 vs 0.314, facts 0.466 vs
    0.468). Only the contexts of ``values[first:]`` are returned; the values before are read
    for their terms.
    """
    terms = [_context_terms(value) for value in values]
    windows = search.neighbour_windows(terms, before, after, first=first)
    return [_context_json(window) for window in windows]
