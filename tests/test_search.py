"""The pure half of ranking: question text → terms, and the re-rank of database candidates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncmem.sql import search
from asyncmem.sql.search import candidate_count, rerank, session_of


def test_candidate_count_is_bounded() -> None:
    assert candidate_count(10) == 10 * search.CANDIDATE_FACTOR
    assert candidate_count(1) == search.CANDIDATE_FACTOR
    assert candidate_count(10_000) == 10_000
    assert candidate_count(search.MAX_CANDIDATES) == search.MAX_CANDIDATES


def test_session_of_tells_json_scalars_apart() -> None:
    assert session_of({"session": 1}) == "1"
    assert session_of({"session": "1"}) == '"1"'
    assert session_of({"session": True}) == "true"
    assert session_of({"session": "d\u00e9j\u00e0"}) == '"d\u00e9j\u00e0"'
    assert session_of({"session": None}) is None
    assert session_of({"session": {"id": 1}}) is None
    assert session_of({"session": [1]}) is None
    assert session_of({}) is None


def test_rerank_of_nothing_is_nothing() -> None:
    assert rerank(["cat"], [], [], 10) == []


def test_rerank_without_metadata_keeps_the_database_order() -> None:
    ranked = rerank(["cat"], [3.0, 5.0, 5.0, 1.0], [{}, {}, {}, {}], 3)
    assert [i for i, _ in ranked] == [1, 2, 0]
    scores = [score for _, score in ranked]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == pytest.approx(1.0)


def test_rerank_does_not_depend_on_the_score_scale() -> None:
    """bm25 and ts_rank_cd differ in scale by orders of magnitude: the order must not."""
    metadata = [{"session": "a"}, {"session": "b"}, {"session": "a"}, {}, {"session": "b"}]
    scores = [4.0, 3.5, 1.0, 3.9, 0.5]
    small = [score / 1000 for score in scores]
    assert [i for i, _ in rerank([], scores, metadata, 5)] == [
        i for i, _ in rerank([], small, metadata, 5)
    ]


def test_rerank_lifts_turns_of_the_best_matching_session() -> None:
    metadata = [{"session": "s1"}, {"session": "s2"}, {"session": "s1"}]
    ranked = rerank(["cat"], [10.0, 6.0, 5.0], metadata, 3)
    assert [i for i, _ in ranked] == [0, 2, 1]


def test_rerank_treats_unlike_sessions_apart() -> None:
    metadata = [{"session": 1}, {"session": "1"}, {"session": 1}]
    ranked = rerank(["cat"], [10.0, 6.0, 5.9], metadata, 3)
    assert [i for i, _ in ranked] == [0, 2, 1]


def test_rerank_with_zero_scores_keeps_the_order() -> None:
    ranked = rerank(["cat"], [0.0, 0.0], [{"session": "a"}, {}], 2)
    assert [i for i, _ in ranked] == [0, 1]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("2023-05-08", "monday 8 may 2023"),
        ("2023/5/8", "monday 8 may 2023"),
        ("8 May 2023", "monday 8 may 2023"),
        ("8th May, 2023", "monday 8 may 2023"),
        ("May 8, 2023", "monday 8 may 2023"),
        ("1:56 pm on 8 May, 2023", "monday 8 may 2023"),
        ("2025-12-20 (Saturday)", "saturday 20 december 2025"),
        ("Sept 3 2021", "friday 3 september 2021"),
        ("2023-05-08T10:00:00+02:00", "monday 8 may 2023"),
    ],
)
def test_date_words_spell_out_dates(text: str, words: str) -> None:
    assert search.date_words(text) == f"{text} {words}"


@pytest.mark.parametrize("text", ["yesterday", "2023-02-30", "13/13/2023", "", "May 2023"])
def test_date_words_leave_other_text_alone(text: str) -> None:
    assert search.date_words(text) == text


def test_rerank_favours_the_speaker_the_question_names() -> None:
    metadata = [{"speaker": "Tom"}, {"speaker": "Priya Shah"}, {"speaker": "Tom"}]
    assert [i for i, _ in rerank(["shah", "bike"], [10.0, 9.0, 8.0], metadata, 3)] == [1, 0, 2]
    assert [i for i, _ in rerank(["bike"], [10.0, 9.0, 8.0], metadata, 3)] == [0, 1, 2]
    odd = [{"speaker": 7}, {"speaker": None}, {}]
    assert [i for i, _ in rerank(["7"], [3.0, 2.0, 1.0], odd, 3)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("question", "temporal"),
    [
        ("When did Hannah adopt the puppy?", True),
        ("How long was the trip to Lisbon?", True),
        ("what year did we move", True),
        ("What did Tom say about the bike?", False),
        ("whenever", False),
    ],
)
def test_is_temporal(question: str, temporal: bool) -> None:
    assert search.is_temporal(question) is temporal


def test_rerank_favours_times_on_when_questions() -> None:
    values = ["We adopted a puppy.", "We adopted him last Saturday.", "Puppies are cute."]
    scores, metadata = [10.0, 9.0, 8.0], [{}, {}, {}]
    plain = rerank(["adopt"], scores, metadata, 3, values=values)
    when = rerank(["adopt"], scores, metadata, 3, values=values, temporal=True)
    assert [i for i, _ in plain] == [0, 1, 2]
    assert [i for i, _ in when] == [1, 0, 2]


def test_speaker_and_context_words_keep_combining_marks() -> None:
    """Speaker names and neighbour context split words as questions do (marks included)."""
    metadata = [{}, {"speaker": "प्रिया शर्मा"}]
    assert [i for i, _ in rerank(["प्रिया"], [10.0, 9.0], metadata, 2)] == [1, 0]
    contexts = search.neighbour_words(["नमस्ते प्रिया, बिल्ली कहाँ है?", "हाँ"])
    assert contexts[1].split() == ["नमस्ते", "प्रिया", "बिल्ली", "कहाँ", "है"]
    assert search.neighbour_words(["İstanbul trip", "yes"])[1] == "istanbul trip"


def test_cjk_words_are_characters_and_pairs() -> None:
    assert search.cjk_words("我的猫叫咪咪，她") == "我 的 猫 叫 咪 我的 的猫 猫叫 叫咪 咪咪 她"
    assert search.cjk_words("ﾐｿ") == "ミ ソ ミソ"  # half-width kana folded (NFKC)
    assert search.cjk_words("Zürich, Kraków and बिल्ली") == ""
    assert search.cjk_words("plain ascii") == ""


def test_cjk_words_stop_at_cjk_chars() -> None:
    text = "".join(chr(0x4E00 + i) for i in range(3 * search.CJK_CHARS))
    words = search.cjk_words("abc " + text).split()
    singles = [word for word in words if len(word) == 1]
    assert len(singles) == search.CJK_CHARS
    assert len(words) == 2 * search.CJK_CHARS - 1
    assert len(search.facets_of({"speaker": "Ann", "date": "8 May 2023"}, text)) < 4096


def test_query_terms_cut_cjk_text_into_pairs() -> None:
    assert search.query_terms("她喜欢吃鱼") == ["她喜欢吃鱼", "她喜", "喜欢", "欢吃", "吃鱼"]
    assert search.query_terms("猫?") == ["猫"]
    assert search.query_terms("Miso猫 is a cat") == ["miso猫", "猫", "miso", "cat"]
    assert len(search.query_terms("猫" * 40_000)) == 2


def test_facets_carry_speaker_date_and_cjk_words() -> None:
    assert search.facets_of({"speaker": "Ann"}, "私の猫") == "Ann 私 の 猫 私の の猫"
    assert search.facets_of({}, "no cjk here") == ""


def test_rerank_tells_sessions_of_other_json_types_apart() -> None:
    """1, true, 1.0 and "1" are four conversations, as :func:`session_of` says: the weak
    turns do not borrow the best turn's score and stay below the memory without a session."""
    metadata = [{"session": 1}, {"session": True}, {"session": 1.0}, {}, {"session": "1"}]
    ranked = rerank(["cat"], [10.0, 2.0, 1.9, 5.0, 1.8], metadata, 5)
    assert [i for i, _ in ranked] == [0, 3, 1, 2, 4]
    same = [{"session": 1}] * 3 + [{}, {"session": 1}]
    assert [i for i, _ in rerank(["cat"], [10.0, 2.0, 1.9, 5.0, 1.8], same, 5)][1] == 1


def _rerank_the_long_way(
    terms: list[str],
    scores: list[float],
    metadata: list[dict[str, object]],
    limit: int,
    values: list[str],
    temporal: bool,
) -> list[tuple[int, float]]:
    """rerank as its docstring and constants describe it, every candidate read."""
    top = max(scores)
    norm = [score / top if top > 0 else 0.0 for score in scores]
    sessions = [search._session_key(meta) for meta in metadata]
    best: dict[object, float] = {}
    for session, value in zip(sessions, norm, strict=True):
        if session is not None:
            best[session] = max(best.get(session, -1.0), value)
    final = []
    for value, session, meta in zip(norm, sessions, metadata, strict=True):
        if session is not None:
            value += search.SESSION_WEIGHT * best[session]
        speaker = meta.get("speaker")
        named = isinstance(speaker, str) and set(terms) & search._name_words(speaker)
        final.append(value + (search.SPEAKER_BOOST if named else 0.0))
    if temporal:
        for i, text in enumerate(values):
            if search._TIME_WORDS.search(text[: search.CONTEXT_CHARS]):
                final[i] += search.TEMPORAL_BOOST
    search._second_pass(terms, final, metadata, values, limit)
    order = sorted(range(len(final)), key=lambda i: (-final[i], i))
    return [(i, final[i]) for i in order[:limit]]


_WORDS = ["cat", "mat", "sat", "last", "saturday", "2023", "dog", "ran"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 10),
            st.sampled_from([None, "a", "b", 1, "1"]),
            st.sampled_from([None, "Cat Stevens", "Dog", ["not", "a", "name"], 7]),
            st.lists(st.sampled_from(_WORDS), max_size=8).map(" ".join),
        ),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3),
    st.integers(1, 6),
    st.booleans(),
)
def test_rerank_s_shortcuts_change_no_result(
    candidates: list[tuple[float, object, object, str]],
    terms: list[str],
    limit: int,
    temporal: bool,
) -> None:
    """Reading only the candidates that can still reach the top (time words, the second
    pass) and finding each speaker's boost once give what reading every candidate gives."""
    scores = [score for score, _, _, _ in candidates]
    metadata = [
        {name: item for name, item in (("session", session), ("speaker", speaker)) if item}
        for _, session, speaker, _ in candidates
    ]
    values = [value for _, _, _, value in candidates]
    expected = _rerank_the_long_way(terms, scores, metadata, limit, values, temporal)
    assert rerank(terms, scores, metadata, limit, values=values, temporal=temporal) == expected


_TIME_PIECES = st.sampled_from(
    [
        "Monday",
        "MAY",
        "may",
        "3 pm",
        "11:30AM",
        "12 pm",
        "2023",
        "1999",
        "Yesterday",
        "day",
        "days",
        "weekend",
        "ago",
        "am",
        "pm",
        "today's",
        "x2023",
        "20233",
        "mayday",
        "ſunday",
        "ǅay",
        "Ⅻ",
        "K",
        " ",
        ", ",
        "\n",
        "-",
        "é",
        "İ",
        "word",
        "3",
        ":",
    ]
)


@settings(max_examples=400)
@given(st.lists(st.one_of(_TIME_PIECES, st.text(max_size=6)), max_size=12).map("".join))
def test_names_a_time_as_the_case_blind_pattern(text: str) -> None:
    """The fast path for ASCII text (lower-cased, case-sensitive pattern) finds a time
    exactly where the ``re.IGNORECASE`` pattern does, on any text."""
    expected = search._TIME_WORDS.search(text[: search.CONTEXT_CHARS]) is not None
    assert search.names_a_time(text) is expected
