"""The adapt teacher: linear fusion of the encoder's cosines and BM25, as margin-MSE examples."""

from __future__ import annotations

import numpy as np
import pytest

from django_sbert.encoder.distillation import lexical_teacher_examples, teacher_scores
from django_sbert.encoder.lexical import BM25
from tests.encoder.test_metrics import TableEncoder, angle


def test_teacher_scores_fuse_on_the_cosines_own_spread():
    cosines = np.array([0.9, 0.5, 0.7])
    lexical = np.array([0.0, 4.0, 2.0])
    # lo 0.5, hi 0.9: w * (cos - 0.5) + (1 - w) * 0.4 * bm25 / 4
    assert teacher_scores(cosines, lexical, 1.0) == pytest.approx([0.4, 0.0, 0.2])
    assert teacher_scores(cosines, lexical, 0.0) == pytest.approx([0.0, 0.4, 0.2])
    assert teacher_scores(cosines, lexical, 0.5) == pytest.approx([0.2, 0.2, 0.2])
    # No word in common anywhere: the teacher is the encoder, shifted.
    assert teacher_scores(cosines, np.zeros(3), 0.5) == pytest.approx([0.2, 0.0, 0.1])


PAIRS = [
    ("kinase inhibitor trial", "the kinase inhibitor was tested"),
    ("heart failure outcomes", "outcomes after heart failure"),
    ("malaria vaccine dose", "a malaria vaccine at one dose"),
]
# The encoder ranks the passages in the opposite order of the words they share.
TABLE = {
    PAIRS[0][0]: angle(0),
    PAIRS[0][1]: angle(40),
    PAIRS[1][0]: angle(60),
    PAIRS[1][1]: angle(10),
    PAIRS[2][0]: angle(32),
    PAIRS[2][1]: angle(20),
}


def test_each_query_gives_the_own_passage_against_candidates_with_the_teachers_margins():
    encoder = TableEncoder(TABLE)
    examples = lexical_teacher_examples(encoder, PAIRS, dense_share=0.5, per_query=2)
    passages = [p for _, p in PAIRS]
    bm25 = BM25(passages)
    vectors = np.array([angle(40), angle(10), angle(20)])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert [e[0] for e in examples] == [q for q, _ in PAIRS]  # one example per query
    for query, own, *others, margins in examples:
        assert (query, own) in PAIRS and own not in others
        assert len(set(others)) == len(margins) == 2  # the two other passages
        q = np.array(TABLE[query]) / np.linalg.norm(TABLE[query])
        scores = teacher_scores(vectors @ q, bm25.scores(query), 0.5)
        expected = [scores[passages.index(own)] - scores[passages.index(o)] for o in others]
        assert margins == pytest.approx(expected)
    # The query and the passages are encoded once each, queries first.
    assert encoder.calls == [[q for q, _ in PAIRS], passages]


def _margins_of(examples, query):
    """{other passage: the teacher's margin of the own passage over it} for one query."""
    (_, _, *others, margins) = next(e for e in examples if e[0] == query)
    return dict(zip(others, margins, strict=True))


def test_the_word_evidence_moves_the_margins_the_encoder_alone_would_give():
    encoder = TableEncoder(TABLE)
    dense = lexical_teacher_examples(encoder, PAIRS, dense_share=1.0, per_query=2)
    fused = lexical_teacher_examples(encoder, PAIRS, dense_share=0.4, per_query=2)
    # "kinase inhibitor trial": the encoder prefers another passage (10 degrees away, against
    # 40 for its own), every shared word says its own; the teacher's margin rises.
    first, second = _margins_of(dense, PAIRS[0][0]), _margins_of(fused, PAIRS[0][0])
    assert set(first) == set(second)
    assert all(second[o] > first[o] for o in first)
    assert min(first.values()) < 0 < min(second.values())


def test_every_example_has_as_many_others_as_every_query_can_be_given():
    encoder = TableEncoder(TABLE)
    # Each side gives 2 candidates, one of which may be the own passage: 1 other for sure.
    two = lexical_teacher_examples(encoder, PAIRS, candidates=2, per_query=5, seed=3)
    assert [len(e) for e in two] == [4, 4, 4] and all(len(e[-1]) == 1 for e in two)
    # With 3 candidates a side, every passage is a candidate: both others, not 5.
    assert {len(e[-1]) for e in lexical_teacher_examples(encoder, PAIRS, per_query=5)} == {2}
    # One candidate a side guarantees no other: no example rather than examples of mixed shape.
    assert lexical_teacher_examples(encoder, PAIRS, candidates=1) == []


def test_nothing_to_compare_and_bad_values():
    encoder = TableEncoder(TABLE)
    assert lexical_teacher_examples(encoder, PAIRS[:1]) == []  # nothing to compare with
    assert lexical_teacher_examples(encoder, []) == []
    assert encoder.calls == []  # and nothing encoded for it
    with pytest.raises(ValueError, match="dense_share must be in"):
        lexical_teacher_examples(encoder, PAIRS, dense_share=1.5)
    with pytest.raises(ValueError, match="candidates and per_query must be >= 1"):
        lexical_teacher_examples(encoder, PAIRS, per_query=0)
