"""STS Spearman and retrieval metrics against values worked out by hand.

The hand-checked cases use ``TableEncoder``, which returns fixed vectors per text, so the
expected numbers can be computed on paper; the real tiny model checks the plumbing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from django_sbert.encoder.metrics import (
    average_ranks,
    retrieval_metrics,
    spearman,
    sts_spearman,
)


class TableEncoder:
    """Looks each text up in a table of 2-d vectors: the metric math, with no model noise."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    def encode(self, texts, batch_size=32, normalize=True):
        self.calls.append(list(texts))
        vectors = np.array([self.table[t] for t in texts], dtype=np.float32)
        if normalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


def angle(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_sts_spearman_ranks_cosines_against_gold_scores():
    encoder = TableEncoder({"a": angle(0), "b": angle(10), "c": angle(50), "d": angle(90)})
    # Cosines: (a, b) > (a, c) > (a, d). Gold in the same order -> 1; reversed -> -1.
    assert sts_spearman(encoder, [("a", "b", 5), ("a", "c", 3), ("a", "d", 0)]) == pytest.approx(
        1.0
    )
    assert sts_spearman(encoder, [("a", "b", 0), ("a", "c", 3), ("a", "d", 5)]) == pytest.approx(
        -1.0
    )
    # One swap among three: rho = 1 - 6 * (1 + 1) / (3 * 8) = 0.5.
    assert sts_spearman(encoder, [("a", "b", 5), ("a", "c", 0), ("a", "d", 3)]) == pytest.approx(
        0.5
    )
    assert encoder.calls[0] == ["a", "b", "c", "d"]  # each distinct text encoded once


def test_sts_spearman_needs_two_pairs():
    with pytest.raises(ValueError, match="at least two"):
        sts_spearman(TableEncoder({"a": [1.0, 0.0]}), [("a", "a", 1.0)])


def test_retrieval_metrics_by_hand():
    corpus = {"d1": "d1", "d2": "d2", "d3": "d3", "d4": "d4"}
    encoder = TableEncoder(
        {
            "q1": angle(0),
            "q2": angle(90),
            "d1": angle(5),  # q1 ranking: d1, d2, d3, d4
            "d2": angle(30),
            "d3": angle(60),
            "d4": angle(100),  # q2 ranking: d4, d3, d2, d1
        }
    )
    queries = {"q1": "q1", "q2": "q2", "q3": "unjudged"}
    relevant = {"q1": {"d2", "d3"}, "q2": {"d1"}}
    result = retrieval_metrics(encoder, queries, corpus, relevant, k=2)
    q1, q2 = result["per_query"]["q1"], result["per_query"]["q2"]
    # q1: top 2 = d1 (miss), d2 (hit). MRR 1/2; DCG 1/log2(3); IDCG 1 + 1/log2(3).
    assert q1["mrr@2"] == pytest.approx(0.5)
    assert q1["ndcg@2"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert q1["recall@2"] == pytest.approx(0.5) and q1["precision@2"] == pytest.approx(0.5)
    # q2: top 2 = d4, d3, the relevant d1 is last: everything 0.
    assert q2 == {"mrr@2": 0.0, "ndcg@2": 0.0, "recall@2": 0.0, "precision@2": 0.0}
    assert result["queries"] == 2 and set(result["per_query"]) == {"q1", "q2"}
    assert result["ndcg@2"] == pytest.approx(q1["ndcg@2"] / 2)
    assert result["mrr@2"] == pytest.approx(0.25)


def test_retrieval_metrics_perfect_ranking_scores_one():
    encoder = TableEncoder({"q": angle(0), "x": angle(1), "y": angle(80)})
    result = retrieval_metrics(encoder, {"q": "q"}, {"x": "x", "y": "y"}, {"q": {"x"}})
    assert {k: result[k] for k in ("mrr@10", "ndcg@10", "recall@10")} == {
        "mrr@10": 1.0,
        "ndcg@10": 1.0,
        "recall@10": 1.0,
    }
    assert result["precision@10"] == pytest.approx(0.1)


def test_retrieval_metrics_reject_unusable_input():
    encoder = TableEncoder({"q": angle(0), "x": angle(1)})
    with pytest.raises(ValueError, match="No query has a relevant document"):
        retrieval_metrics(encoder, {"q": "q"}, {"x": "x"}, {"other": {"x"}})
    with pytest.raises(ValueError, match="k must be at least 1"):
        retrieval_metrics(encoder, {"q": "q"}, {"x": "x"}, {"q": {"x"}}, k=0)


def test_metrics_on_the_tiny_model_are_in_range(tiny_encoder):
    pairs = [
        ("bank rate", "interest rate", 0.8),
        ("cat", "election vote", 0.1),
        ("dog", "dogs", 0.9),
    ]
    assert -1.0 <= sts_spearman(tiny_encoder, pairs) <= 1.0
    corpus = {f"d{i}": text for i, text in enumerate(["bank money", "cat dog", "vote party"])}
    result = retrieval_metrics(tiny_encoder, {"q": "money market"}, corpus, {"q": {"d0"}}, k=3)
    assert result["recall@3"] == 1.0 and 0 < result["ndcg@3"] <= 1.0


@pytest.mark.slow
def test_minilm_sts_spearman_is_high_on_clear_pairs(minilm):
    pairs = [
        ("A man is playing a guitar.", "A man plays the guitar.", 5.0),
        ("A woman is slicing an onion.", "A woman is cutting an onion.", 4.6),
        ("A dog runs in the park.", "A cat sleeps on the sofa.", 1.0),
        ("The stock market fell today.", "A child is eating an apple.", 0.0),
        ("Two men are playing chess.", "Two people are playing a board game.", 3.6),
    ]
    assert sts_spearman(minilm, pairs) > 0.8


def test_average_ranks_share_the_mean_rank_among_ties():
    assert average_ranks([10, 20, 20, 30]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert average_ranks([3, 1, 3, 3, 2]).tolist() == [4.0, 1.0, 4.0, 4.0, 2.0]
    assert average_ranks([]).tolist() == []


def test_spearman_known_values():
    # scipy's documented example: spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) = 0.8207826816681233
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(
        0.8207826816681233, abs=1e-12
    )
    assert spearman([1, 2, 3], [10, 100, 1000]) == pytest.approx(1.0)  # monotone, not linear
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # No ties: rho = 1 - 6 * sum(d^2) / (n (n^2 - 1)); d = (0, -2, 1, 1) -> 1 - 36 / 60 = 0.4.
    assert spearman([1, 2, 3, 4], [1, 4, 2, 3]) == pytest.approx(0.4)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))  # a constant side has no ranking
    assert math.isnan(spearman([1], [2]))
    with pytest.raises(ValueError, match="one length"):
        spearman([1, 2], [1, 2, 3])


@pytest.mark.filterwarnings("ignore:An input array is constant")  # scipy, on a 2-value draw
def test_spearman_agrees_with_scipy_on_tied_data():
    stats = pytest.importorskip("scipy.stats")  # a dev dependency: the reference, not a need
    rng = np.random.default_rng(0)
    for size in (2, 3, 10, 257):
        x = rng.integers(0, 5, size).astype(float)  # many ties
        y = x + rng.normal(0, 2, size).round(1)
        expected = stats.spearmanr(x, y).statistic
        if np.isnan(expected):
            assert math.isnan(spearman(x, y))
        else:
            assert spearman(x, y) == pytest.approx(expected, abs=1e-12)
        np.testing.assert_allclose(average_ranks(y), stats.rankdata(y))
