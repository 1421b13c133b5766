"""Index terms (asyncmem.sql.terms): what the postings hold, the same for both dialects."""

from __future__ import annotations

import json
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from asyncmem.sql import search, terms
from asyncmem.sql.terms import neighbour_contexts, own_terms, question_terms, term_of


def _terms(context: str) -> list[str]:
    return list(json.loads(context)) if context else []


def test_terms_are_folded_and_stemmed_words() -> None:
    assert term_of("cats") == term_of("cat") == "cat"
    assert term_of("running") == "run"
    assert term_of("café") == term_of("cafe")
    assert term_of("zürich") == "zurich"
    # Other scripts keep their marks: they are letters there, not accents.
    assert term_of("बिल्ली") == "बिल्ली"
    assert term_of("我的猫") == "我的猫"


def test_question_terms_are_distinct_and_in_order() -> None:
    words = search.query_terms("Cats? The cat, and café CAFES!")
    assert question_terms(words) == ["cat", "cafe"]


def test_own_terms_weigh_fields_and_count_every_word() -> None:
    words, length = own_terms("pet", "The cat and the other cat", "Alice")
    weights = json.loads(words)
    own, facet = round(terms.SCALE * 1.0), round(terms.SCALE * search.FACET_WEIGHT)
    assert weights == {"pet": own, "cat": 2 * own, "alic": facet}
    # Stop words are not postings, but they are words: BM25's length counts them.
    assert length == 1 + 6 + 1
    assert own_terms("", "", "") == ("", 0)


def test_a_word_in_several_fields_sums_its_weights() -> None:
    weights = json.loads(own_terms("cat", "cat", "cat")[0])
    assert weights == {"cat": round(terms.SCALE * (2 + search.FACET_WEIGHT))}


def test_neighbour_contexts_read_both_sides_and_clip() -> None:
    assert neighbour_contexts([]) == []
    assert neighbour_contexts(["only"]) == [""]
    long = " ".join(f"w{i:04d}" for i in range(search.CONTEXT_CHARS))  # 6 characters a word
    read = _terms(neighbour_contexts([long, "b"], before=1)[1])
    assert read == long[: search.CONTEXT_CHARS].split()
    assert len(read) < len(long.split())
    assert term_of("7" * 1000) == "7" * terms.MAX_TERM_CHARS
    weight = round(terms.SCALE * search.CONTEXT_WEIGHT)
    assert json.loads(neighbour_contexts(["cats", "b"])[1]) == {"cat": weight}


def test_neighbour_contexts_from_a_position_match_the_whole_list() -> None:
    turns = ["Where did Ana go?", "To Lisbon, with Ana's sister", "Lisbon in May?", "yes", "ok"]
    whole = neighbour_contexts(turns, before=2, after=2)
    assert _terms(whole[2]) == ["ana", "go", "lisbon", "sister", "ye", "ok"]
    assert _terms(neighbour_contexts(turns, before=1, after=1)[2]) == [
        "lisbon",
        "ana",
        "sister",
        "ye",
    ]
    for first in range(len(turns) + 1):
        assert neighbour_contexts(turns, 2, 2, first=first) == whole[first:]


def test_context_terms_keep_combining_marks() -> None:
    contexts = neighbour_contexts(["नमस्ते प्रिया, बिल्ली कहाँ है?", "हाँ"])
    assert _terms(contexts[1]) == ["नमस्ते", "प्रिया", "बिल्ली", "कहाँ", "है"]
    assert _terms(neighbour_contexts(["İstanbul trip", "yes"])[1]) == ["istanbul", "trip"]


def test_every_combining_mark_takes_the_careful_split() -> None:
    """``lower_words`` splits text without a character of ``_MAYBE_MARK`` by a regular
    expression alone, which would cut words at combining marks: every mark must be in it."""
    marks = (chr(c) for c in range(0x300, 0x110000) if unicodedata.category(chr(c))[0] == "M")
    assert [m for m in marks if search._MAYBE_MARK.match(m) is None] == []


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_text_splits_as_the_regular_expression_does(text: str) -> None:
    assert list(search.lower_words(text)) == search._WORD.findall(text.lower())


def test_the_fast_split_gives_the_careful_split() -> None:
    for text in ["“Quoted” — café, naïve Ⅻ ½", "Где моя кошка?", "我的猫 ミソ", "नमस्ते प्रिया"]:
        lowered = unicodedata.normalize("NFKC", text).lower()
        assert list(search.lower_words(text)) == list(search._words(lowered))
