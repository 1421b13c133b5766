"""How well each candidate's own text covers the question: the second pass of re-ranking.

Pure functions, no I/O. The database's BM25 mixes a memory's own words with its neighbours'
and its facets, so a turn found only through its context can outrank the turn that says it.
:func:`coverage_and_proximity` reads the candidates' own text (value, and an attachment's
caption) once, split into words, and gives each candidate two numbers in [0, 1]: the share
of the question's weight its text covers (each term weighted by its rarity among the
candidates), and how many of the question's terms sit close together in it.
:func:`~asyncmem.sql.search.rerank` adds them with small weights.

Terms are matched as the very words the question used, without stemming: stage one already
finds a memory by the stems of the question's words, and rewarding the exact form on top of
that measured better than a second, crude stemmer (recall@1 / recall@10 / MRR@10 on the
shipped set 0.462/0.761/0.564 against 0.449/0.761/0.556; RealMem turns and facts within
0.001). So ``terms`` must be the question's words as written (lower-cased, as
:func:`~asyncmem.sql.search.query_terms` gives them), not stems. A CJK term (a character or
a pair) is found inside a word.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from itertools import pairwise

__all__ = ["COVERAGE_CHARS", "PROXIMITY_WORDS", "coverage_and_proximity"]

COVERAGE_CHARS = 2000
"""At most this much of a candidate's own text is read, so the second pass stays cheap on
long replies. Offline on each question's captured top 50 (recall@1 / recall@10 / MRR@10,
RealMem turns | facts | shipped): 4000 → 0.049/0.299/0.164 | 0.125/0.474/0.321 |
0.462/0.761/0.564; 2000 → 0.047/0.299/0.164 | 0.124/0.474/0.321 | the same; 1000 →
0.047/0.299/0.163 | 0.121/0.474/0.318 | the same. Cost on RealMem turns (long replies),
reading every candidate: 2.6 ms a question at 4000, 2.2 at 2000, 1.7 at 1000; reading only
the candidates that can still reach the top (see ``search._second_pass``) about 1 ms."""
PROXIMITY_WORDS = 3
"""Two different question terms at most this many words apart count as near."""

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")


_ASCII_WORDS = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in range(256))
"""ASCII text: everything but letters and digits becomes a space, so ``split`` finds words
(as bytes: three times faster than ``str.translate``, fifteen than the regular expression)."""


def _words(text: str) -> list[str]:
    """The lower-cased words of the first :data:`COVERAGE_CHARS` of ``text``."""
    text = text[:COVERAGE_CHARS]
    if text.isascii():
        return text.lower().encode().translate(_ASCII_WORDS).decode().split()
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def _hits(words: list[str], matched: set[str], term_of: dict[str, int]) -> list[tuple[int, int]]:
    """(position, term) of every word of ``words`` in ``matched``, in order; found by
    ``list.index`` (a scan in C) rather than a Python loop over every word."""
    hits: list[tuple[int, int]] = []
    for word in matched:
        term = term_of[word]
        at = words.index(word)
        count = words.count(word)
        hits.append((at, term))
        for _ in range(count - 1):
            at = words.index(word, at + 1)
            hits.append((at, term))
    hits.sort()
    return hits


def coverage_and_proximity(terms: Sequence[str], texts: Sequence[str]) -> list[tuple[float, float]]:
    """For each of ``texts``: (weighted share of ``terms`` it contains, share of the terms'
    pairs found within :data:`PROXIMITY_WORDS` of each other, at most 1).

    A term's weight is BM25's inverse document frequency among ``texts`` (the candidates),
    so a word every candidate has counts for little. Texts with none of the terms, and
    questions of one term (for proximity), give 0. Terms are compared to words as they are
    (see the module's docstring); a CJK term (a character or a pair) is found inside a word.
    """
    if not terms or not texts:
        return [(0.0, 0.0) for _ in texts]
    wanted = {term: index for index, term in reversed(list(enumerate(terms)))}
    cjk = [(index, term) for index, term in enumerate(terms) if _CJK.search(term)]
    term_of = dict(wanted)
    seen: set[str] = set()
    found: list[tuple[list[str], set[str], set[int]]] = []
    frequency = [0] * len(terms)
    for text in texts:
        words = _words(text)
        distinct = set(words)
        if cjk:
            for word in distinct - seen:
                index = next((i for i, piece in cjk if piece in word), -1)
                if index >= 0:
                    term_of.setdefault(word, index)
            seen |= distinct
        matched = distinct.intersection(term_of)
        present = {term_of[word] for word in matched}
        found.append((words, matched, present))
        for found_term in present:
            frequency[found_term] += 1
    n = len(texts)
    weight = [math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0 for df in frequency]
    total = sum(weight)
    pairs = sum(1 for df in frequency if df) - 1
    features = []
    for words, matched, present in found:
        if not present:
            features.append((0.0, 0.0))
            continue
        coverage = sum([weight[index] for index in present]) / total
        proximity = 0.0
        if pairs > 0 and len(present) > 1:
            hits = _hits(words, matched, term_of)
            near: set[tuple[int, int]] = set()
            for (at, one), (next_at, other) in pairwise(hits):
                if one != other and next_at - at <= PROXIMITY_WORDS:
                    near.add((min(one, other), max(one, other)))
            proximity = min(1.0, len(near) / pairs)
        features.append((coverage, proximity))
    return features
