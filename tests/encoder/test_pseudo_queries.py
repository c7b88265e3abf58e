"""Pseudo-queries from unlabelled documents: spans, offsets, documents too short to split."""

from __future__ import annotations

import random

import pytest

from django_sbert.encoder.pseudo_queries import (
    hold_out,
    inverse_cloze,
    pseudo_pairs,
    random_crops,
    sentence_spans,
    word_spans,
)

DOC = (
    "Vitamin D and bone density\n"
    "Low vitamin D levels are common in older adults, e.g. in winter. "
    "Supplements of 3.5 mg raised bone density in the trial! "
    "Falls did not change? the authors say more work is needed."
)


def texts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[a:b] for a, b in spans]


def test_sentences_split_at_end_marks_and_line_breaks_not_at_abbreviations_or_decimals():
    assert texts(DOC, sentence_spans(DOC)) == [
        "Vitamin D and bone density",  # the title: a line of its own
        "Low vitamin D levels are common in older adults, e.g. in winter.",
        "Supplements of 3.5 mg raised bone density in the trial!",
        # "? the": a lower-case word after the mark does not start a sentence
        "Falls did not change? the authors say more work is needed.",
    ]
    assert sentence_spans("  padded.   Two here.  ") == [(2, 9), (12, 21)]
    assert sentence_spans("") == [] and sentence_spans(" \n ") == []


def test_inverse_cloze_query_is_one_sentence_and_positive_the_rest_at_its_offsets():
    for seed in range(20):
        query, rest = inverse_cloze(DOC, random.Random(seed))
        sentences = sentence_spans(DOC)
        assert query in sentences
        # The rest: every other sentence, as at most two contiguous spans around the query.
        covered = [s for s in sentences if any(a <= s[0] and s[1] <= b for a, b in rest)]
        assert covered == [s for s in sentences if s != query]
        assert all(not (a < query[1] and query[0] < b) for a, b in rest)  # no overlap


def test_pairs_carry_offsets_back_into_their_document():
    docs = [DOC, "Short title\nOne sentence that is long enough to be a query."]
    built = pseudo_pairs(docs, method="ict", seed=3)
    assert [p.document for p in built.pairs] == [0, 1] and built.too_short == []
    for pair in built.pairs:
        doc = docs[pair.document]
        assert doc[pair.query_span[0] : pair.query_span[1]] == pair.query
        assert pair.positive == " ".join(doc[a:b] for a, b in pair.positive_spans)
        assert pair.query not in pair.positive
    # Only the second sentence of document 1 is long enough to be the query.
    assert built.pairs[1].query == "One sentence that is long enough to be a query."
    assert built.pairs[1].positive == "Short title"


def test_documents_too_short_to_split_are_listed_not_dropped_silently():
    docs = ["One sentence only, no second.", "", "Tiny. Bits.", DOC]
    built = pseudo_pairs(docs, method="ict")
    # No second sentence; nothing; no sentence of 20 characters to be the query.
    assert built.too_short == [0, 1, 2]
    assert [p.document for p in built.pairs] == [3]
    crops = pseudo_pairs(["four words only here", DOC], method="crop", min_words=4)
    assert crops.too_short == [0] and [p.document for p in crops.pairs] == [1]
    assert inverse_cloze("One sentence.", random.Random(0)) is None
    assert random_crops("a b c", random.Random(0), min_words=2) is None


def test_keep_query_makes_the_whole_document_the_positive():
    query, rest = inverse_cloze(DOC, random.Random(0), keep_query=1.0)
    spans = sentence_spans(DOC)
    assert rest == ((spans[0][0], spans[-1][1]),)
    assert query in spans


def test_crops_are_word_spans_of_bounded_length_and_differ():
    words = word_spans(DOC)
    starts, ends = {a for a, _ in words}, {b for _, b in words}
    for seed in range(30):
        first, second = random_crops(DOC, random.Random(seed), min_words=4, max_ratio=0.5)
        assert first != second
        for a, b in (first, second):
            assert a in starts and b in ends  # whole words
            count = len(DOC[a:b].split())
            assert 4 <= count <= len(words) // 2


def test_same_seed_same_pairs_other_seed_other_pairs():
    docs = [DOC] * 10
    one = pseudo_pairs(docs, method="crop", seed=1, min_words=3)
    assert one == pseudo_pairs(docs, method="crop", seed=1, min_words=3)
    assert one != pseudo_pairs(docs, method="crop", seed=2, min_words=3)


def test_hold_out_is_a_seeded_disjoint_slice():
    built = pseudo_pairs([DOC] * 50, seed=0)
    train, held = hold_out(built.pairs, 0.2, seed=0, most=7)
    assert len(held) == 7 and len(train) == 43
    assert (train, held) == hold_out(built.pairs, 0.2, seed=0, most=7)
    assert hold_out(built.pairs, 0.0) == (built.pairs, [])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"method": "bm25"}, "method must be one of ict, crop"),
        ({"keep_query": 2}, "keep_query"),
        ({"min_words": 0}, "min_words"),
        ({"max_ratio": 0}, "max_ratio"),
    ],
)
def test_bad_options_are_refused_with_the_reason(options, message):
    with pytest.raises(ValueError, match=message):
        pseudo_pairs([DOC], **options)
