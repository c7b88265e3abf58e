"""BM25 in memory: the word-matching half of the adapt teacher."""

from __future__ import annotations

import math

import pytest

from django_sbert.encoder.lexical import BM25, words


def test_words_are_lower_cased_without_function_words_or_single_characters():
    assert words("The p53 protein, and X-rays: a Review of it!") == [
        "p53",
        "protein",
        "rays",
        "review",
    ]


def test_scores_are_okapi_bm25_computed_by_hand():
    documents = ["cats purr", "cats cats sleep all day long", "dogs bark"]
    scores = BM25(documents).scores("Cats that bark")
    lengths = [2, 5, 2]  # "all" is a function word
    average = sum(lengths) / 3

    def term(df: int, tf: int, length: int) -> float:
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))

    expected = [term(2, 1, 2), term(2, 2, 5), term(1, 1, 2)]
    assert scores == pytest.approx(expected)


def test_rare_words_weigh_more_and_unshared_words_score_nothing():
    bm25 = BM25(["common rare", "common words", "common ones", "nothing shared"])
    scores = bm25.scores("common rare")
    assert scores.argmax() == 0 and scores[3] == 0.0
    only_words = bm25.scores("unknown words")  # a word no document holds adds nothing
    assert only_words[1] > 0 and not only_words[[0, 2, 3]].any()
    assert only_words[1] == pytest.approx(bm25.scores("words")[1])
    assert not bm25.scores("").any() and not BM25([]).scores("anything").size


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="0 <= b <= 1"):
        BM25(["x"], b=2.0)
    with pytest.raises(ValueError, match="k1 >= 0"):
        BM25(["x"], k1=-1)
