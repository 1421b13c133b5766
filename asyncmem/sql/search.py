"""Question text → full-text search expressions. Pure functions, no I/O.

A question is data, never syntax: it is split into words (Unicode letters and digits), common
English function words are dropped, and each remaining word is quoted so that FTS5 or
``to_tsquery`` sees a plain term. Terms are OR-ed: the database's ranking (bm25 /
``ts_rank_cd``) rewards memories that match more of them and rarer ones.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["MAX_TERMS", "STOP_WORDS", "fts5_expression", "query_terms", "tsquery_expression"]

MAX_TERMS = 32
"""Most distinct terms taken from one question; the rest of a very long text is ignored."""

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve don doesn didn isn aren wasn weren won wouldn shouldn couldn
    """.split()
)
"""Small on purpose: larger lists measured no better (DESIGN.md §8)."""

_WORD = re.compile(r"[^\W_]+")


def query_terms(text: str) -> list[str]:
    """Distinct lower-cased words of ``text`` that are worth searching for, in order."""
    terms: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(unicodedata.normalize("NFKC", text).lower()):
        word = match.group()
        if word in STOP_WORDS or word in seen:
            continue
        seen.add(word)
        terms.append(word)
        if len(terms) == MAX_TERMS:
            break
    return terms


def fts5_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression that ORs ``terms``, each a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def tsquery_expression(terms: list[str]) -> str:
    """A ``to_tsquery`` expression that ORs ``terms``, each a quoted lexeme."""
    return " | ".join("'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)
