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

import bisect
import math
import re
import unicodedata
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from itertools import accumulate, pairwise

__all__ = ["COVERAGE_CHARS", "PROXIMITY_WORDS", "ascii_words", "coverage_and_proximity"]

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


def ascii_words(text: str) -> list[str]:
    """The lower-cased words (runs of letters and digits) of ASCII ``text``: what
    ``[^\\W_]+`` finds in it, 2.3 times faster on RealMem's turns (15 against 36 µs a turn)."""
    return text.encode().translate(_ASCII_WORDS).decode().lower().split()


def _words(text: str) -> list[str]:
    """The lower-cased words of the first :data:`COVERAGE_CHARS` of ``text``."""
    text = text[:COVERAGE_CHARS]
    if text.isascii():
        return ascii_words(text)
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


_NEAR_GAP = re.compile(rf"[\W_]*(?:[^\W_]+[\W_]+){{0,{PROXIMITY_WORDS - 1}}}")
"""What may separate two words that sit within :data:`PROXIMITY_WORDS` of each other: at
most ``PROXIMITY_WORDS - 1`` words."""

_NONE_FOUND: tuple[AbstractSet[int], int] = (frozenset(), 0)


def _found_together(
    terms: Sequence[str], texts: Sequence[str], wanted: dict[str, int]
) -> list[tuple[AbstractSet[int], int]]:
    r"""Each text's present terms and how many pairs of them sit near, when no term is CJK.

    What :func:`_words` and :func:`_hits` give, found with ``str.find`` in all the texts
    joined by newlines (normalised and lower-cased text by text, as each alone would be),
    each find kept where it is a whole word (``[^\W_]``, the words' letters, is exactly
    ``str.isalnum``), rather than by splitting every text into words. A term that is not a
    word is none of the words. No pattern is compiled: each question's terms differ."""
    parts = [text[:COVERAGE_CHARS] for text in texts]
    joined = "\n".join(parts)
    if joined.isascii():
        joined = joined.lower()
    else:
        # Text by text: NFKC and lower-casing may change a text's length ("İ" is two
        # characters lower-cased), and the offsets must be its own.
        parts = [unicodedata.normalize("NFKC", part).lower() for part in parts]
        joined = "\n".join(parts)
    size = len(joined)
    found_at: list[tuple[int, int, int]] = []
    find = joined.find
    for term, index in wanted.items():
        if not term.isalnum():
            continue
        width = len(term)
        at = find(term)
        while at >= 0:
            end = at + width
            if (at == 0 or not joined[at - 1].isalnum()) and (
                end == size or not joined[end].isalnum()
            ):
                found_at.append((at, end, index))
            at = find(term, end)
    found: list[tuple[AbstractSet[int], int]] = [_NONE_FOUND] * len(texts)
    if not found_at:
        return found
    found_at.sort()
    starts = list(accumulate([len(part) + 1 for part in parts[:-1]], initial=0))
    hits: dict[int, list[tuple[int, int, int]]] = {}
    where = bisect.bisect_right
    for hit in found_at:
        text = where(starts, hit[0]) - 1
        if text in hits:
            hits[text].append(hit)
        else:
            hits[text] = [hit]
    near_gap = _NEAR_GAP.fullmatch
    for text, in_text in hits.items():
        present = {term for _, _, term in in_text}
        near: set[tuple[int, int]] = set()
        if len(present) > 1:
            for (_, end, one), (begin, _, other) in pairwise(in_text):
                if one != other and near_gap(joined, end, begin):
                    near.add((one, other) if one < other else (other, one))
        found[text] = (present, len(near))
    return found


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
    if not cjk:
        return _scored(len(terms), _found_together(terms, texts, wanted))
    term_of = dict(wanted)
    seen: set[str] = set()
    found: list[tuple[list[str], set[str], set[int]]] = []
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
    counted: list[tuple[set[int], int]] = []
    for words, matched, present in found:
        near: set[tuple[int, int]] = set()
        if len(present) > 1:
            hits = _hits(words, matched, term_of)
            for (at, one), (next_at, other) in pairwise(hits):
                if one != other and next_at - at <= PROXIMITY_WORDS:
                    near.add((min(one, other), max(one, other)))
        counted.append((present, len(near)))
    return _scored(len(terms), counted)


def _scored(
    term_count: int, found: Sequence[tuple[AbstractSet[int], int]]
) -> list[tuple[float, float]]:
    """Coverage and proximity from each text's present terms and near pairs."""
    frequency = [0] * term_count
    for present, _ in found:
        for term in present:
            frequency[term] += 1
    n = len(found)
    weight = [math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0 for df in frequency]
    total = sum(weight)
    pairs = sum(1 for df in frequency if df) - 1
    features = []
    for present, near in found:
        if not present:
            features.append((0.0, 0.0))
            continue
        coverage = sum([weight[index] for index in present]) / total
        proximity = min(1.0, near / pairs) if pairs > 0 and len(present) > 1 else 0.0
        features.append((coverage, proximity))
    return features
