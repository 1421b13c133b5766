"""How well each candidate's own text covers the question: the second pass of re-ranking.

Pure functions, no I/O. The database's BM25 mixes a memory's own words with its neighbours'
and its facets, so a turn found only through its context can outrank the turn that says it.
:func:`coverage_and_proximity` reads the candidates' own text (value, and an attachment's
caption) once, split into words, and gives each candidate two numbers in [0, 1]: the share
of the question's weight its text covers (each term weighted by its rarity among the
candidates), and how many of the question's terms sit close together in it.
:func:`~asyncmem.sql.search.rerank` adds them with small weights.

Terms are matched as words after a crude stemmer ("tomato" finds "tomatoes", "diving"
finds "dive"), a CJK term (a character or a pair) inside a word. Stage one has its own
stemmer; this one only has to agree with itself.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from itertools import pairwise

__all__ = ["COVERAGE_CHARS", "PROXIMITY_WORDS", "coverage_and_proximity", "stem"]

COVERAGE_CHARS = 2000
"""At most this much of a candidate's own text is read, so the second pass stays cheap on
long replies. Offline on the captured top 50 (recall@1 / recall@10 / MRR@10, RealMem turns
| facts | shipped): 4000 → 0.048/0.299/0.165 | 0.124/0.475/0.322 | 0.458/0.761/0.562 at 2.6
ms a question on turns; 2000 → 0.048/0.300/0.165 | 0.124/0.474/0.322 | the same, 2.2 ms;
1000 → 0.045/0.298/0.163 | 0.122/0.475/0.319."""
PROXIMITY_WORDS = 3
"""Two different question terms at most this many words apart count as near."""

_WORD = re.compile(r"[^\W_]+")
_ENDING = re.compile(r"(?:ingly|edly|ings|ing|ed|es|ly|s|e)$")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")


def stem(word: str) -> str:
    """``word`` without one common English ending ("ies" → "y"), if three letters remain.

    Crude on purpose: it only has to map a question's word and the text's word to the same
    string ("tomatoes" / "tomato", "diving" / "dive", "cherries" / "cherry").
    """
    if len(word) <= 4 or not word.isascii():
        return word
    if word.endswith(("ies", "ied")):
        return word[:-3] + "y"
    stripped = _ENDING.sub("", word)
    return stripped if len(stripped) >= 3 else word


_ASCII_WORDS = str.maketrans({c: " " for c in map(chr, range(128)) if not c.isalnum()})
"""ASCII text: everything but letters and digits becomes a space, so ``split`` finds words
(five times faster than the regular expression)."""


def _words(text: str) -> list[str]:
    """The lower-cased words of the first :data:`COVERAGE_CHARS` of ``text``."""
    text = text[:COVERAGE_CHARS]
    if text.isascii():
        return text.lower().translate(_ASCII_WORDS).split()
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def coverage_and_proximity(terms: Sequence[str], texts: Sequence[str]) -> list[tuple[float, float]]:
    """For each of ``texts``: (weighted share of ``terms`` it contains, share of the terms'
    pairs found within :data:`PROXIMITY_WORDS` of each other, at most 1).

    A term's weight is BM25's inverse document frequency among ``texts`` (the candidates),
    so a word every candidate has counts for little. Texts with none of the terms, and
    questions of one term (for proximity), give 0. Terms are compared to words after
    :func:`stem`; a CJK term (a character or a pair) is found inside a word.
    """
    if not terms or not texts:
        return [(0.0, 0.0) for _ in texts]
    wanted: dict[str, int] = {}
    for index, term in enumerate(terms):
        wanted.setdefault(stem(term), index)
    cjk = [(index, term) for index, term in enumerate(terms) if _CJK.search(term)]
    prefixes = {key[:3] for key in wanted}
    seen: set[str] = set()
    term_of: dict[str, int] = {}

    def learn(words: set[str]) -> None:
        new = words - seen
        seen.update(new)
        for word in new if cjk else [word for word in new if word[:3] in prefixes]:
            index = wanted.get(word, -1)
            if index < 0:
                index = wanted.get(stem(word), -1)
            if index < 0 and cjk:
                index = next((i for i, piece in cjk if piece in word), -1)
            if index >= 0:
                term_of[word] = index

    found: list[tuple[list[str], set[str]]] = []
    frequency = [0] * len(terms)
    for text in texts:
        words = _words(text)
        distinct = set(words)
        learn(distinct)
        matched = distinct.intersection(term_of)
        found.append((words, matched))
        for found_term in {term_of[word] for word in matched}:
            frequency[found_term] += 1
    n = len(texts)
    weight = [math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0 for df in frequency]
    total = sum(weight)
    pairs = sum(1 for df in frequency if df) - 1
    features = []
    for words, matched in found:
        present = {term_of[word] for word in matched}
        coverage = sum(weight[index] for index in present) / total if total else 0.0
        proximity = 0.0
        if pairs > 0 and len(present) > 1:
            hits = [(at, term_of[word]) for at, word in enumerate(words) if word in matched]
            near: set[tuple[int, int]] = set()
            for (at, one), (next_at, other) in pairwise(hits):
                if one != other and next_at - at <= PROXIMITY_WORDS:
                    near.add((min(one, other), max(one, other)))
            proximity = min(1.0, len(near) / pairs)
        features.append((coverage, proximity))
    return features
