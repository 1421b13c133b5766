"""The second pass of re-ranking: query coverage and proximity over a candidate's own text."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asyncmem.sql import coverage, search
from asyncmem.sql.coverage import coverage_and_proximity
from asyncmem.sql.search import caption_of, facets_of, rerank


def test_coverage_counts_the_question_s_own_word_forms() -> None:
    """Stage one matched stems already; the second pass rewards the exact form."""
    [(exact, _), (other_form, _)] = coverage_and_proximity(["tomatoes"], ["Tomatoes!", "tomato"])
    assert exact > 0
    assert other_form == 0.0


def test_coverage_weighs_rare_terms_more() -> None:
    texts = ["the cat sat on the mat", "a cat and a dog", "my cat", "a dog"]
    features = coverage_and_proximity(["cat", "mat"], texts)
    assert features[0][0] == pytest.approx(1.0)
    # "mat" is in one text of four, "cat" in three: covering "mat" is worth more.
    only_cat = features[2][0]
    assert 0 < only_cat < 0.5
    assert features[3] == (0.0, 0.0)


def test_coverage_reads_words_not_substrings() -> None:
    [(found, _), (not_found, _)] = coverage_and_proximity(
        ["cat"], ["Cat, everywhere!", "concatenate the category"]
    )
    assert found > 0
    assert not_found == 0


def test_proximity_counts_terms_that_sit_close() -> None:
    near, far, alone = coverage_and_proximity(
        ["brake", "squeal"],
        [
            "my brake squeal in the rain",
            "the brake is fine, but one day, in the rain, something began to squeal",
            "squeal",
        ],
    )
    assert near[1] == pytest.approx(1.0)
    assert far[1] == 0.0
    assert alone[1] == 0.0
    [(_, single)] = coverage_and_proximity(["brake"], ["brake brake"])
    assert single == 0.0


def test_coverage_finds_cjk_pieces_inside_words() -> None:
    [(found, _), (other, _)] = coverage_and_proximity(["咪咪"], ["我的猫叫咪咪", "没有"])
    assert found > 0
    assert other == 0.0


def test_coverage_of_nothing() -> None:
    assert coverage_and_proximity([], ["a"]) == [(0.0, 0.0)]
    assert coverage_and_proximity(["a"], []) == []


def test_coverage_reads_only_the_start_of_a_long_text() -> None:
    late = "x " * coverage.COVERAGE_CHARS + "cat"
    assert coverage_and_proximity(["cat"], [late, "cat"])[0] == (0.0, 0.0)


def test_rerank_prefers_the_candidate_that_says_it_over_one_found_by_context() -> None:
    """Equal database scores: the turn whose own words hold the question's rises."""
    values = ["Yes, definitely!", "We adopt a puppy, called Pickle"]
    ranked = rerank(["adopt", "puppy"], [1.0, 1.0], [{}, {}], 2, values=values)
    assert [i for i, _ in ranked] == [1, 0]
    assert [i for i, _ in rerank(["adopt", "puppy"], [1.0, 1.0], [{}, {}], 2)] == [0, 1]


def test_rerank_reads_a_caption_as_the_memory_s_own_text() -> None:
    metadata = [{}, {"caption": "mustard-yellow wool socks on a floor"}]
    values = ["Finished!", "Here's a pic of them. Super cozy."]
    ranked = rerank(["socks", "yellow"], [1.0, 1.0], metadata, 2, values=values)
    assert [i for i, _ in ranked] == [1, 0]


def test_caption_is_a_string_and_clipped() -> None:
    assert caption_of({"caption": "a grey cat"}) == "a grey cat"
    assert caption_of({"caption": 3}) == ""
    assert caption_of({}) == ""
    long = "x" * (search.CAPTION_CHARS + 5)
    assert caption_of({"caption": long}) == "x" * search.CAPTION_CHARS


def test_facets_hold_the_caption_and_its_cjk_pieces() -> None:
    facets = facets_of({"speaker": "Jess", "caption": "A tabby cat in purple yarn"}, "Look!")
    assert facets == "Jess A tabby cat in purple yarn"
    assert "咪咪" in facets_of({"caption": "我的猫叫咪咪"}).split()
    assert facets_of({"caption": ["not", "text"]}) == ""


def test_the_second_pass_reads_only_candidates_that_can_reach_the_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[list[str]] = []

    def spy(terms: list[str], texts: list[str]) -> list[tuple[float, float]]:
        read.append(list(texts))
        return [(1.0, 1.0)] * len(texts)

    monkeypatch.setattr(search, "coverage_and_proximity", spy)
    scores = [10.0, 9.9, 9.8, 1.0]
    ranked = rerank(["cat"], scores, [{}] * 4, 2, values=["a", "b", "c", "far behind"])
    assert read == [["a", "b", "c"]]
    assert [i for i, _ in ranked] == [0, 1]
    read.clear()
    many = [10.0 - i / 100 for i in range(50)]
    rerank(["cat"], many, [{}] * 50, 10, values=[str(i) for i in range(50)])
    assert read == [[str(i) for i in range(search.SECOND_PASS_FACTOR * 10)]]


def _word_by_word(terms: Sequence[str], texts: Sequence[str]) -> list[tuple[float, float]]:
    """The second pass as its docstring says it, one word at a time: the reference for the
    pattern that finds every text's terms at once."""
    wanted = {term: index for index, term in reversed(list(enumerate(terms)))}
    found = []
    for text in texts:
        hits = [
            (at, wanted[word]) for at, word in enumerate(coverage._words(text)) if word in wanted
        ]
        near = {
            (min(one, other), max(one, other))
            for (at, one), (next_at, other) in pairwise(hits)
            if one != other and next_at - at <= coverage.PROXIMITY_WORDS
        }
        found.append(({term for _, term in hits}, len(near)))
    return coverage._scored(len(terms), found)


_WORDS = ["cat", "cats", "mat", "at", "a", "x1", "1", "café", "cafe", "fi", "ﬁsh", "fish"]
_WORDS += ["σ", "ς", "ΣΑΣ", "i̇", "İstanbul", "istanbul", "straße", "STRASSE", "naïve"]
_GLUE = [" ", "  ", ", ", "-", "_", "'", "\n", ".", "é", "\u0301", "’", "😀", "\t"]


@settings(max_examples=400, deadline=None)
@given(
    terms=st.lists(
        st.sampled_from([*_WORDS[:9], "istanbul", "ς", "σας", "fish", "naïve"]),
        min_size=1,
        max_size=5,
    ),
    texts=st.lists(
        st.lists(st.tuples(st.sampled_from(_WORDS), st.sampled_from(_GLUE)), max_size=16).map(
            lambda pairs: "".join(word + glue for word, glue in pairs)
        ),
        min_size=1,
        max_size=6,
    ),
    case=st.sampled_from([str, str.upper, str.title]),
)
@example(
    terms=["cat", "mat"], texts=["x " * coverage.COVERAGE_CHARS + "cat mat", "cat_mat"], case=str
)
@example(terms=["istanbul", "cat"], texts=["İstanbul cat İ cat", "ΣΑΣ cat"], case=str)
def test_all_texts_at_once_is_word_by_word(
    terms: list[str], texts: list[str], case: object
) -> None:
    """The terms found by one pattern over the joined texts are the words each text splits
    into (case and NFKC forms, word boundaries, offsets after characters that lower-casing
    or NFKC lengthen, the first ``COVERAGE_CHARS`` only)."""
    assert callable(case)
    cased = [case(text) for text in texts]
    assert coverage_and_proximity(terms, cased) == _word_by_word(terms, cased)
