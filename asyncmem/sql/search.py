"""Question text → full-text search expressions. Pure functions, no I/O.

A question is data, never syntax: it is split into words (Unicode letters and digits), common
English function words are dropped, and each remaining word is quoted so that FTS5 or
``to_tsquery`` sees a plain term. Terms are OR-ed: the database's BM25 ranking (FTS5's
``bm25()``, or the same formula on PostgreSQL) rewards memories that match more of them and
rarer ones.

Ranking is two stages: the database returns :func:`candidate_count` candidates and
:func:`rerank` orders them, the same on SQLite and PostgreSQL, ending with a second pass over
the candidates' own text (:mod:`asyncmem.sql.coverage`). What ranking needs from
conversations is built at write time from the metadata keys ``session``, ``speaker``,
``date`` and ``caption``: :func:`~asyncmem.sql.terms.neighbour_contexts` and
:func:`facets_of`. Each constant below names the measurement that chose it
(``benchmarks/relevance.py`` and, for stage two offline, ``benchmarks/rerank_lab.py``;
RealMem is a public set of conversations with labelled questions, as turns and as extracted
facts, used for development; "shipped" is ``asyncmem-conversations-v1``, the set in
``asyncmem/evaluation/data``: its first 177 questions for the constants chosen before issue
21, all 224 for the caption and the second pass).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any

from asyncmem.sql.coverage import ascii_words, coverage_and_proximity

__all__ = [
    "BM25_B",
    "BM25_K1",
    "CANDIDATE_FACTOR",
    "CAPTION_CHARS",
    "CAPTION_KEY",
    "CJK_CHARS",
    "CONTEXT_AFTER",
    "CONTEXT_BEFORE",
    "CONTEXT_CHARS",
    "CONTEXT_WEIGHT",
    "COVERAGE_WEIGHT",
    "FACET_WEIGHT",
    "MAX_CANDIDATES",
    "MAX_TERMS",
    "PROXIMITY_WEIGHT",
    "SECOND_PASS_FACTOR",
    "SESSION_WEIGHT",
    "SPEAKER_BOOST",
    "STOP_WORDS",
    "TEMPORAL_BOOST",
    "candidate_count",
    "caption_of",
    "cjk_words",
    "date_words",
    "facets_of",
    "fts5_expression",
    "is_temporal",
    "lower_words",
    "neighbour_windows",
    "neighbour_words",
    "query_terms",
    "rerank",
    "session_of",
    "tsquery_expression",
]

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
"""Small on purpose: larger stop-word lists measured no better on either data set."""

_WORD = re.compile(r"[^\W_]+")
_FIRST_MARK = "\u0300"
"""No combining mark comes before U+0300: a cheap test before ``unicodedata.category``."""


def _words(text: str) -> Iterator[str]:
    """The words of ``text``: letters and digits with the combining marks inside and after them.

    Python's ``\\w`` leaves out combining marks, which would cut "बिल्ली" (Hindi), "பூனை"
    (Tamil) or a vowelled Arabic word into pieces that PostgreSQL's parser never makes, so a
    question could not find the very words it quotes. FTS5 drops or splits at the marks
    itself, the same way for the quoted term as for the indexed text.
    """
    word, end = "", -1
    for match in _WORD.finditer(text):
        if match.start() == end:
            word += match.group()
        else:
            if word:
                yield word
            word = match.group()
        end = match.end()
        while (
            end < len(text)
            and text[end] >= _FIRST_MARK
            and unicodedata.category(text[end]).startswith("M")
        ):
            end += 1
        word += text[match.end() : end]
    if word:
        yield word


_INVISIBLE = re.compile("[\ufe00-\ufe0f\u180b-\u180d\u180f\U000e0100-\U000e01ef]")
"""Variation selectors: marks by category, but they only pick a glyph ("❤️", "cat️")."""


def lower_words(text: str) -> Iterator[str]:
    """The lower-cased words of ``text``, as :func:`query_terms` and the write side read them.

    Variation selectors are dropped, and so is the combining dot that lower-casing "İ" adds,
    which no index keeps.
    """
    if text.isascii():
        yield from ascii_words(text)
        return
    lowered = _INVISIBLE.sub(
        "", unicodedata.normalize("NFKC", text).lower().replace("i\u0307", "i")
    )
    if _MAYBE_MARK.search(lowered) is None:
        # Most non-ASCII text (curly quotes, dashes, emoji, Latin accents that NFKC composes,
        # Cyrillic, Greek, CJK) has no combining mark: the plain split gives the same words,
        # 5× faster.
        yield from _WORD.findall(lowered)
        return
    yield from _words(lowered)


_MAYBE_MARK = re.compile(
    "[\u0300-\u036f\u0483-\u0489\u0591-\u0fff\u1000-\u1dff\u20d0-\u20ff\u2cef-\u2dff"
    "\u302a-\u309a\ua66f-\uabff\ufb1e\ufe00-\ufe2f\U00010000-\U0010ffff]"
)
"""Blocks that hold every combining mark (a test checks each one), and letters around them:
text without any of these is split by the regular expression alone."""


_CJK = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+"
)
"""A run of Chinese characters or Japanese kana: scripts written without spaces between words,
which FTS5's ``unicode61`` and PostgreSQL's parser both keep as one word however long."""


CJK_CHARS = 700
"""At most this many characters of a memory's CJK text are cut into pieces for the index.

Its pieces then stay under the 4,096 characters of ``facets`` that PostgreSQL's index reads
(at most 700 characters and 699 pairs, with room for speaker and date), so both databases find
the same words; CJK text past it is found only as whole runs."""


def _cjk_pieces(run: str) -> Iterator[str]:
    """A CJK run as a question searches it: a lone character, else each pair of neighbours."""
    if len(run) == 1:
        yield run
    else:
        yield from (run[i : i + 2] for i in range(len(run) - 1))


def cjk_words(text: str) -> str:
    """Every character and every neighbouring pair of the CJK runs of ``text``, for the index.

    "我的猫叫咪咪" gains "我 的 猫 叫 咪 我的 的猫 猫叫 叫咪 咪咪", so the question "咪咪" (or
    "猫") finds it: the bigram indexing of CJK search engines, without a dictionary. Distinct
    pieces only; text without CJK gives "".
    """
    if text.isascii():
        return ""
    runs: list[str] = []
    room = CJK_CHARS
    for run in _CJK.findall(unicodedata.normalize("NFKC", text)):
        runs.append(run[:room])
        room -= len(runs[-1])
        if room == 0:
            break
    pieces = chain.from_iterable(chain(run, _cjk_pieces(run)) for run in runs)
    return " ".join(dict.fromkeys(pieces))


def _terms_of(word: str) -> Iterator[str]:
    """The search terms of one word: itself, and for CJK text its pieces and other parts."""
    yield word
    if word.isascii() or not _CJK.search(word):
        return
    for run in _CJK.findall(word):
        yield from _cjk_pieces(run)
    yield from (part for part in _CJK.split(word) if part)


def query_terms(text: str) -> list[str]:
    """Distinct lower-cased words of ``text`` that are worth searching for, in order.

    A word with CJK text in it also brings that text's characters pairs (see
    :func:`cjk_words`), so a word inside an unspaced sentence can be found.
    """
    terms: list[str] = []
    seen: set[str] = set()
    for term in chain.from_iterable(map(_terms_of, lower_words(text))):
        if term in STOP_WORDS or term in seen:
            continue
        seen.add(term)
        terms.append(term)
        if len(terms) == MAX_TERMS:
            break
    return terms


def fts5_expression(terms: list[str]) -> str:
    """An FTS5 MATCH expression that ORs ``terms``, each a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def tsquery_expression(terms: list[str]) -> str:
    """A ``to_tsquery`` expression that ORs ``terms``, each a quoted lexeme."""
    return " | ".join("'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)


CAPTION_KEY = "caption"
"""The metadata key of an attachment's caption or alt text (a string): a turn that is only a
photo ("Here's a pic of them!") is found by what the photo shows. Indexed with the facets
and read by the second pass as the memory's own text.

Shipped set (issue 21's ``photo`` questions, 12), recall@10 / MRR@10 on SQLite: not indexed
0.792 / 0.472 (found through the neighbours' words only), indexed 0.958 / 0.743 (see
benchmarks/README.md); the other sets have no captions."""
CAPTION_CHARS = 300
"""At most this much of a caption is indexed and read (about fifty words, a long alt text):
with the CJK pieces (:data:`CJK_CHARS`, shared by value and caption), speaker and date the
facets stay under the 4,096 characters PostgreSQL's index reads."""

CANDIDATE_FACTOR = 5
"""The database returns this many times ``limit`` candidates for :func:`rerank` to order."""
MAX_CANDIDATES = 500
"""Upper bound on candidates, so a huge ``limit`` does not pull the whole index."""
SESSION_WEIGHT = 0.5
"""How much a candidate gains from the best (normalised) score in its ``session``.

A light session-level score: the conversation that matches best lends its turns weight, so
the answer that sits beside the matching question rises. Measured with
``benchmarks/relevance.py`` on RealMem (frac@10, turns / facts): 0 → 0.235 / 0.409,
0.3 → 0.265 / 0.433, 0.6 → 0.274 / 0.437, 1.0 → — / 0.438; 0.5 is on the plateau. Checked
again with today's context (frac@10 facts / turns / shipped): 0.3 → 0.471 / 0.290 / 0.718,
0.5 → 0.470 / 0.299 / 0.712, 0.7 → 0.470 / 0.304 / 0.706: turns and the shipped set pull
opposite ways, 0.5 kept.
"""

CONTEXT_WEIGHT = 0.3
"""Weight of the neighbour-context field against the memory's own words (1.0).

RealMem frac@10 with full-text context: turns 0.235 → 0.314, facts 0.409 → 0.468 at 0.3;
facts 0.475 at 0.2 (on fact-style memories half weight hurt, a fifth to a third helped). With
today's context (frac@10 facts / turns / shipped): 0.2 → 0.474 / 0.298 / 0.718, 0.3 →
0.470 / 0.299 / 0.712, 0.4 → 0.466 / 0.301 / 0.712: within a question or two, 0.3 kept."""
FACET_WEIGHT = 0.5
"""Weight of the speaker, date and CJK words against the memory's own words (1.0).

Flat where measured (frac@10 facts / turns / shipped): 0.3 → 0.470 / 0.300 / 0.712, 0.5 →
0.470 / 0.299 / 0.712, 0.8 → 0.469 / 0.299 / 0.712; none of the sets has CJK text."""


BM25_K1 = 1.2
"""BM25's term-frequency saturation: FTS5's ``bm25()`` constant."""
BM25_B = 0.75
"""BM25's length normalisation: FTS5's ``bm25()`` constant.

b ≈ 0.3 measured best on short chat turns of another set; on RealMem (PostgreSQL, frac@10 turns /
facts) 0.5 → 0.287 / 0.470, 0.75 → 0.299 / 0.466, 0.9 → 0.304 / 0.460: FTS5's value kept."""


SPEAKER_BOOST = 0.3
"""Added to a candidate whose ``speaker`` the question names (any word of the name).

Shipped set frac@10 / MRR@10: 0 → 0.664 / 0.489, 0.3 → 0.678 / 0.497, 0.6 → 0.678 / 0.509;
RealMem names no speakers (only "User"/"Assistant"), see benchmarks/README.md."""


SPEAKER_CACHE = 256
"""The words of this many speakers' names are kept: re-splitting them for every candidate
was a fifth of ``rerank``'s time on the shipped set."""


@functools.lru_cache(maxsize=SPEAKER_CACHE)
def _name_words(speaker: str) -> frozenset[str]:
    """A speaker's words: a conversation has few speakers, so they are split once."""
    return frozenset(lower_words(speaker))


TEMPORAL_BOOST = 0.2
"""Added, on a "when / how long" question, to a candidate whose text names a time.

Shipped set frac@10 (temporal questions / all): 0 → 0.690 / 0.678, 0.2 → 0.793 / 0.695,
0.4 → 0.793 / 0.695; RealMem Temporal-reasoning: facts 0.526 → 0.540, turns 0.361 → 0.361,
all questions unchanged (turns 0.314, facts 0.470)."""

_TEMPORAL_QUESTION = re.compile(
    r"\b(when|how long|how many (days|weeks|months|years)|what (date|day|month|year|time))\b",
    re.IGNORECASE,
)
_TIME_WORDS = re.compile(
    r"\b(yesterday|today|tomorrow|tonight|ago|last|next|weekend|morning|evening|week|weeks"
    r"|month|months|year|years|day|days|(?:19|20)\d\d|monday|tuesday|wednesday|thursday"
    r"|friday|saturday|sunday|january|february|march|april|may|june|july|august|september"
    r"|october|november|december|\d{1,2}(?::\d\d)?\s*(?:am|pm))\b",
    re.IGNORECASE,
)
_TIME_WORDS_LOWER = re.compile(_TIME_WORDS.pattern)
"""The same words, case-sensitive, for lower-cased ASCII text: 3.5 times faster than
``re.IGNORECASE`` (9.5 against 34 µs a 500-character RealMem turn)."""


def names_a_time(text: str) -> bool:
    """Whether the first :data:`CONTEXT_CHARS` of ``text`` name a time (a weekday, a month,
    "yesterday", a year, "3 pm", ...): what the temporal boost rewards."""
    head = text[:CONTEXT_CHARS]
    if head.isascii():
        return _TIME_WORDS_LOWER.search(head.lower()) is not None
    return _TIME_WORDS.search(head) is not None


def is_temporal(text: str) -> bool:
    """Whether the question asks when something happened or how long it took."""
    return _TEMPORAL_QUESTION.search(text) is not None


def candidate_count(limit: int) -> int:
    """How many rows the database should rank for a query that wants ``limit``."""
    return max(limit, min(limit * CANDIDATE_FACTOR, MAX_CANDIDATES))


def session_of(metadata: Mapping[str, Any]) -> str | None:
    """The conversation a memory belongs to, as JSON text (``1`` and ``"1"`` differ), or None.

    Only a JSON scalar names a session; an object or list under ``session`` is just metadata.
    """
    session = metadata.get("session")
    if session is None or isinstance(session, dict | list):
        return None
    return json.dumps(session, ensure_ascii=False)


COVERAGE_WEIGHT = 0.15
"""Added times the weighted share of the question's words a candidate's own text holds.

The database's BM25 mixes a memory's own words with its neighbours' and facets', so a turn
found only through its context can outrank the turn that says it; the second pass
(:mod:`asyncmem.sql.coverage`) reads the candidates' own text (value and caption).
Measured offline on each question's captured top 50, recall@1 / recall@10 / MRR@10,
RealMem turns | facts | shipped (issue 21's extended set, captions not yet indexed), with
proximity 0.05: 0 → 0.046/0.299/0.164 | 0.122/0.470/0.317 | 0.449/0.761/0.557; 0.1 →
0.046/0.299/0.163 | 0.125/0.472/0.320 | 0.462/0.761/0.564; 0.15 → 0.047/0.299/0.164 |
0.124/0.474/0.321 | 0.462/0.761/0.564; 0.2 → 0.048/0.299/0.164 | 0.125/0.474/0.321 |
0.458/0.761/0.563; 0.4 → 0.047/0.296/0.163 | 0.126/0.475/0.323 | 0.449/0.761/0.558.
Small gains, on all three sets; recall@10 is where stage one put it. On the per-user
postings (revision 0006, captions indexed): 0 → 0.042/0.295/0.158 | 0.126/0.469/0.319 |
0.446/0.770/0.561; 0.15 → 0.043/0.293/0.160 | 0.127/0.470/0.322 | 0.442/0.770/0.561; 0.3 →
0.043/0.289/0.159 | 0.131/0.471/0.324 | 0.451/0.770/0.565: smaller there, revisit with
``benchmarks/rerank_lab.py`` when stage one settles."""
PROXIMITY_WEIGHT = 0.05
"""Added times the share of the question's word pairs that sit near each other in it.

With coverage 0.15 (as above): 0 → 0.047/0.298/0.164 | 0.124/0.473/0.320 |
0.462/0.761/0.564; 0.05 → 0.047/0.299/0.164 | 0.124/0.474/0.321 | 0.462/0.761/0.564; 0.1
→ 0.047/0.299/0.164 | 0.126/0.474/0.321 | 0.462/0.761/0.565: flat, 0.05 kept."""


def caption_of(metadata: Mapping[str, Any]) -> str:
    """The caption or alt text of a memory's attachment (:data:`CAPTION_KEY`), or ""."""
    caption = metadata.get(CAPTION_KEY)
    return caption[:CAPTION_CHARS] if isinstance(caption, str) else ""


SECOND_PASS_FACTOR = 2
"""The second pass reads at most this many times ``limit`` candidates, the best first.

Offline (top 50 captured, recall@1 / recall@10 / MRR@10, RealMem turns | facts | shipped):
all that can still reach the top → 0.048/0.299/0.164 | 0.125/0.474/0.321 |
0.462/0.761/0.564; 3× → the same; 2× → 0.047/0.299/0.164 | the same | the same; 1.5× →
0.048/0.298/0.164 | 0.125/0.475/0.321 | the same. Of 50 candidates, 22–27 on average (up to
all 50) can still reach the top of 10 on these sets; the cap halves the worst case."""


def _second_pass(
    terms: Sequence[str],
    final: list[float],
    metadata: Sequence[Mapping[str, Any]],
    values: Sequence[str],
    limit: int,
) -> None:
    """Add coverage and proximity to ``final``, reading only the candidates that could still
    reach the top ``limit`` (each gains at most the two weights, so one that far behind the
    ``limit``-th cannot), and of those at most :data:`SECOND_PASS_FACTOR` × ``limit``."""
    room = COVERAGE_WEIGHT + PROXIMITY_WEIGHT
    bar = sorted(final, reverse=True)[min(limit, len(final)) - 1] - room
    read = [i for i, score in enumerate(final) if score >= bar]
    if len(read) > SECOND_PASS_FACTOR * limit:
        read = sorted(sorted(read, key=lambda i: -final[i])[: SECOND_PASS_FACTOR * limit])
    own = [
        f"{values[i]}\n{caption}" if (caption := caption_of(metadata[i])) else values[i]
        for i in read
    ]
    for i, (coverage, proximity) in zip(read, coverage_and_proximity(terms, own), strict=True):
        final[i] += COVERAGE_WEIGHT * coverage + PROXIMITY_WEIGHT * proximity


def _session_key(metadata: Mapping[str, Any]) -> tuple[type, object] | None:
    """What :func:`session_of` tells apart (``1``, ``1.0``, ``"1"`` and ``true`` differ),
    without writing JSON for every candidate."""
    session = metadata.get("session")
    if session is None or isinstance(session, dict | list):
        return None
    return type(session), session


def rerank(
    terms: Sequence[str],
    scores: Sequence[float],
    metadata: Sequence[Mapping[str, Any]],
    limit: int,
    *,
    values: Sequence[str] | None = None,
    temporal: bool = False,
) -> list[tuple[int, float]]:
    """Order the database's candidates: ``(index into the candidates, final score)``, best first.

    Stage two of ranking, the same for SQLite and PostgreSQL: ``scores`` are the
    database's relevance (higher is better, BM25 of either dialect, any scale), ``metadata``
    each candidate's. Scores are divided by the best one, so every constant below means the
    same on both dialects. With ``values``, a second pass reads each candidate's own text
    (value and caption): how much of the question it covers and how close the question's
    words sit in it. Ties keep the database's order.
    """
    if not scores:
        return []
    top = max(scores)
    norm = [score / top if top > 0 else 0.0 for score in scores]
    best_in_session: dict[tuple[type, object], float] = {}
    sessions = [_session_key(meta) for meta in metadata]
    for session, value in zip(sessions, norm, strict=True):
        if session is not None and value > best_in_session.get(session, -1.0):
            best_in_session[session] = value
    asked = set(terms)
    named: dict[object, float] = {None: 0.0}  # a speaker's boost, found once per speaker
    final = []
    for value, session, meta in zip(norm, sessions, metadata, strict=True):
        if session is not None:
            value += SESSION_WEIGHT * best_in_session[session]
        speaker = meta.get("speaker")
        if not isinstance(speaker, str):
            speaker = None
        boost = named.get(speaker)
        if boost is None:
            boost = named[speaker] = SPEAKER_BOOST if asked & _name_words(speaker) else 0.0
        final.append(value + boost)
    if values is not None:
        if temporal and TEMPORAL_BOOST:
            # Only candidates that could still reach the top with every boost are read (a
            # search costs ~5 µs): the others are out of it with or without this one.
            room = TEMPORAL_BOOST + COVERAGE_WEIGHT + PROXIMITY_WEIGHT
            bar = sorted(final, reverse=True)[min(limit, len(final)) - 1] - room
            for i, text in enumerate(values):
                if final[i] >= bar and names_a_time(text):
                    final[i] += TEMPORAL_BOOST
        if COVERAGE_WEIGHT > 0 or PROXIMITY_WEIGHT > 0:
            _second_pass(terms, final, metadata, values, limit)
    order = sorted(range(len(final)), key=lambda i: (-final[i], i))
    return [(i, final[i]) for i in order[:limit]]


CONTEXT_BEFORE = 2
"""A turn's context holds this many turns of the same ``session`` before it: the question a
short answer replies to. On RealMem turns (frac@10, with one turn after): 1 → 0.295, 2 →
0.299, 3 → 0.300 (facts 0.468, 0.470, 0.471; shipped 0.709, 0.712, 0.706)."""
CONTEXT_AFTER = 1
"""… and this many after it: the reply a short question received.

Measured with two turns before (frac@10 RealMem facts / RealMem turns / shipped): none →
0.465 / 0.287 / 0.712; one → 0.470 / 0.299 / 0.712; two → 0.470 / 0.314 / 0.695. The second
turn after helps one set and hurts another, and each turn after is a neighbour whose index
entry a new turn rewrites: with one, a turn's store is 1.83–1.85× a plain store in the
replay (``relevance.py --twin``), with two 2.01–2.19×."""
CONTEXT_CHARS = 500
"""At most this much of each neighbour's text goes into a turn's context.

Measured on RealMem turns (frac@10): 2000 → 0.314, 500 → 0.311; a quarter of the index."""
CONTEXT_CACHE = 512
"""The words of this many recent turns are kept, so a conversation's tail, read again at each
new turn, is not split into words again. With only the changed contexts computed, Python per
turn in the writer's thread went from 143 to 70 µs (RealMem turns)."""

_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_MONTH_NUMBER = {name[:3]: number for number, name in enumerate(_MONTHS, 1)}
_ISO_DATE = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_MONTH = r"(jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+(\d{4})\b")
_MONTH_DAY_YEAR = re.compile(r"\b" + _MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")


def _date(year: str, month: int, day: str) -> dt.date | None:
    try:
        return dt.date(int(year), month, int(day))
    except ValueError:
        return None


def date_words(text: str) -> str:
    """``text`` with the date in it spelled out as words: weekday, day, month name, year.

    "2023-05-08", "8 May 2023", "May 8th, 2023" and "1:56 pm on 8 May, 2023" all gain
    "monday 8 may 2023", so a question saying "in May" or "2023" finds the memory. Text with
    no date it can read comes back as it is.
    """
    lowered = text.lower()
    found: dt.date | None = None
    if match := _ISO_DATE.search(lowered):
        found = _date(match[1], int(match[2]), match[3])
    elif match := _DAY_MONTH_YEAR.search(lowered):
        found = _date(match[3], _MONTH_NUMBER[match[2][:3]], match[1])
    elif match := _MONTH_DAY_YEAR.search(lowered):
        found = _date(match[3], _MONTH_NUMBER[match[1][:3]], match[2])
    if found is None:
        return text
    spelled = f"{found:%A} {found.day} {_MONTHS[found.month - 1]} {found.year}".lower()
    return f"{text} {spelled}"


def facets_of(metadata: Mapping[str, Any], value: str = "") -> str:
    """Words a memory is found by besides its own: who said it (``speaker``), when
    (``date``, also spelled out as words) and what its attachment shows (``caption``) from
    ``metadata``, and the characters and character pairs of the CJK text in ``value``."""
    parts: list[str] = []
    speaker = metadata.get("speaker")
    if isinstance(speaker, str | int | float) and not isinstance(speaker, bool):
        parts.append(str(speaker))
    date = metadata.get("date")
    if isinstance(date, str | int | float) and not isinstance(date, bool):
        parts.append(date_words(str(date)))
    if caption := caption_of(metadata):
        parts.append(caption)
        value = f"{value}\n{caption}"
    if grams := cjk_words(value):
        parts.append(grams)
    return " ".join(parts)


def _context_words(value: str) -> tuple[str, ...]:
    return _distinct_words(value[:CONTEXT_CHARS])


@functools.lru_cache(maxsize=CONTEXT_CACHE)
def _distinct_words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(word for word in lower_words(text) if word not in STOP_WORDS))


def neighbour_words(
    values: Sequence[str], before: int | None = None, after: int | None = None
) -> list[str]:
    """Each turn's context as the full-text indexes of revisions 0003 to 0005 kept it: the
    distinct words (not terms) of its neighbours, space-separated. Their migrations and the
    downgrade of 0006 write it; the store writes :func:`~asyncmem.sql.terms.neighbour_contexts`.
    """
    words = [_context_words(value) for value in values]
    return [" ".join(dict.fromkeys(window)) for window in neighbour_windows(words, before, after)]


def neighbour_windows(
    items: Sequence[Sequence[str]],
    before: int | None = None,
    after: int | None = None,
    *,
    first: int = 0,
) -> Iterator[Iterator[str]]:
    """For each turn from ``first`` on, the ``items`` of up to ``before`` turns before it and
    ``after`` turns after it (default :data:`CONTEXT_BEFORE`, :data:`CONTEXT_AFTER`), in
    order: the window a turn's context is made of."""
    before = CONTEXT_BEFORE if before is None else before
    after = CONTEXT_AFTER if after is None else after
    for i in range(first, len(items)):
        yield chain.from_iterable([*items[max(0, i - before) : i], *items[i + 1 : i + 1 + after]])
