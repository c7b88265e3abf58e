"""The position-based click model: it recovers how visitors look and click from a log drawn
with known numbers, tells wanted rows from chance clicks, and refuses counts that are not."""

from __future__ import annotations

import numpy as np
import pytest

from django_sbert.feedback.clickmodel import Shown, fit, relevances

LOOKED = 1 / np.arange(1, 11) ** 0.7  # P(looked at) by position
CLICK_WANTED, CLICK_UNWANTED = 0.9, 0.1


def drawn_log(queries: int = 300, visitors: int = 12, seed: int = 0):
    """Each query shows 10 rows in a fixed order, wanted ones more often near the top; each
    visitor looks at and clicks them by the numbers above. Returns the pairs as ``Shown`` and
    whether each was wanted."""
    rng = np.random.default_rng(seed)
    pairs, wanted = [], []
    for _ in range(queries):
        is_wanted = rng.random(10) < 0.6 / np.arange(1, 11)
        looked = rng.random((visitors, 10)) < LOOKED
        clicks = looked & (rng.random((visitors, 10)) < np.where(is_wanted, 0.9, 0.1))
        for position in range(10):
            pairs.append(Shown((position + 1,), (visitors,), (int(clicks[:, position].sum()),)))
            wanted.append(bool(is_wanted[position]))
    return pairs, np.array(wanted)


def test_fit_recovers_how_visitors_look_and_click():
    pairs, _ = drawn_log()
    model = fit(pairs)
    assert model.examination[0] == 1.0
    assert np.abs(model.examination - LOOKED).max() < 0.06
    assert model.click_wanted == pytest.approx(CLICK_WANTED, abs=0.04)
    assert model.click_unwanted == pytest.approx(CLICK_UNWANTED, abs=0.03)
    assert "looked at by position: 1.00" in model.describe()


def test_relevance_tells_wanted_rows_from_chance_clicks():
    pairs, wanted = drawn_log()
    model = fit(pairs)
    chance = np.array(relevances(model, pairs))
    clicked = np.array([sum(p.clicked) > 0 for p in pairs])
    kept = clicked & (chance >= 0.5)
    assert wanted[clicked].mean() < 0.5  # most clicked pairs are chance clicks
    assert wanted[kept].mean() > 0.9  # what passes is right
    assert kept[wanted & clicked].mean() > 0.85  # and most right pairs pass
    # the same three clicks out of ten showings: unlikely on a first result (most visitors
    # look at it and pass it by), likely on a fifth (few look there, and they clicked)
    first = model.relevance(Shown((1,), (10,), (3,)))
    fifth = model.relevance(Shown((5,), (10,), (3,)))
    assert first < 0.05 and fifth > 0.8
    assert model.relevance(Shown((1, 3), (5, 5), (4, 0))) > 0.5  # the positions add up


def test_weights_count_identical_pairs_once():
    pairs, _ = drawn_log(queries=60)
    repeated = fit(pairs + pairs[:50])
    weighted = fit(pairs, weights=[2.0] * 50 + [1.0] * (len(pairs) - 50))
    assert np.allclose(repeated.examination, weighted.examination)
    assert repeated.click_wanted == pytest.approx(weighted.click_wanted)


@pytest.mark.parametrize(
    ("shown", "message"),
    [
        (Shown((1,), (2,), (3,)), "not a count"),
        (Shown((0,), (2,), (1,)), "not a count"),
        (Shown((1, 2), (2,), (1,)), "same length"),
        (Shown((), (), ()), "at least once"),
    ],
)
def test_counts_that_are_not_counts_are_refused(shown, message):
    with pytest.raises(ValueError, match=message):
        fit([shown])
    with pytest.raises(ValueError, match="at least one"):
        fit([])
