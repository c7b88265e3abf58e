"""Which clicked results visitors wanted: a position-based click model fitted to the search log.

A click is weak evidence on its own: visitors click the first result whether it is right or
not, and once a query is searched often, a wrong row shown eighth gathers a few chance clicks.
The position-based model (Craswell et al. 2008; Chuklin, Markov and de Rijke, *Click Models
for Web Search*, 2015) separates the two causes of a click:

* a visitor looks at the result in position k with probability ``examination[k]`` (1 for the
  first position, fewer for each below);
* a result they look at is clicked with probability ``click_wanted`` when it is one they
  wanted, ``click_unwanted`` when it is not;
* a (query, row) pair is wanted with a prior probability ``prior[k]`` that depends on the
  position it was shown in most (search puts wanted rows higher).

Expectation-maximisation fits all of these to every result the log shows, clicked or not, so
no number is set by hand; then each clicked pair gets the posterior probability that it was
wanted (``PositionModel.relevance``).

No Django here: ``feedback.pairs`` reads the counts from the log and calls ``fit``::

    model = fit([Shown((1, 2), (30, 4), (2, 0)), ...], weights=[1, ...])
    model.relevance(Shown((8,), (10,), (3,)))  # 0.0 .. 1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EPSILON = 1e-6


@dataclass(frozen=True)
class Shown:
    """Where one (query, row) pair was shown in the log: 1-based positions, how many times it
    was shown at each, and how many of those showings were clicked."""

    positions: Sequence[int]
    shown: Sequence[int]
    clicked: Sequence[int]


@dataclass(frozen=True)
class PositionModel:
    """A fitted position-based click model (see the module's docstring)."""

    examination: np.ndarray  # P(looked at) by position - 1; examination[0] is 1
    click_wanted: float  # P(clicked | looked at, wanted)
    click_unwanted: float  # P(clicked | looked at, not wanted)
    prior: np.ndarray  # P(wanted) by the position - 1 a pair is shown at most
    iterations: int

    def relevance(self, pair: Shown) -> float:
        """The probability that visitors wanted this (query, row) pair, given where it was
        shown and clicked."""
        return relevances(self, [pair])[0]

    def _posterior(self, entries: _Entries) -> np.ndarray:
        last = len(self.examination) - 1
        seen = self.examination[np.minimum(entries.position, last)]
        prior = self.prior[np.minimum(entries.bucket, len(self.prior) - 1)]
        log_odds = np.log(prior) - np.log1p(-prior)
        for rate, sign in ((self.click_wanted, 1.0), (self.click_unwanted, -1.0)):
            click = seen * rate
            per_entry = entries.clicked * np.log(click) + entries.missed * np.log1p(-click)
            log_odds = log_odds + sign * np.bincount(
                entries.pair, per_entry, minlength=entries.pairs
            )
        return 1.0 / (1.0 + np.exp(-np.clip(log_odds, -700, 700)))

    def describe(self) -> str:
        looked = ", ".join(f"{p:.2f}" for p in self.examination[:10])
        return (
            f"looked at by position: {looked}; clicked when looked at: wanted "
            f"{self.click_wanted:.2f}, not wanted {self.click_unwanted:.2f}"
        )


@dataclass
class _Entries:
    """The pairs as flat arrays: one entry per (pair, position) with its counts."""

    pair: np.ndarray  # index of the pair
    position: np.ndarray  # 0-based
    clicked: np.ndarray
    missed: np.ndarray  # showings not clicked
    bucket: np.ndarray  # per pair: the 0-based position it was shown at most (ties: higher)
    weight: np.ndarray  # per pair: how many identical pairs it stands for
    pairs: int

    @classmethod
    def of(cls, pairs: Sequence[Shown], weights: Sequence[float]) -> _Entries:
        index, position, shown, clicked, bucket = [], [], [], [], []
        for number, pair in enumerate(pairs):
            if not (len(pair.positions) == len(pair.shown) == len(pair.clicked)):
                raise ValueError("positions, shown and clicked must have the same length")
            if not pair.positions:
                raise ValueError("a pair must have been shown at least once")
            for where, times, clicks in zip(pair.positions, pair.shown, pair.clicked, strict=True):
                if where < 1 or clicks < 0 or times < max(1, clicks):
                    raise ValueError(
                        f"position {where} shown {times} times with {clicks} clicks is not a count"
                    )
                index.append(number)
                position.append(where - 1)
                shown.append(times)
                clicked.append(clicks)
            most = max(zip(pair.shown, (-p for p in pair.positions), strict=True))
            bucket.append(-most[1] - 1)
        clicks_array = np.asarray(clicked, dtype=np.float64)
        return cls(
            pair=np.asarray(index, dtype=np.int64),
            position=np.asarray(position, dtype=np.int64),
            clicked=clicks_array,
            missed=np.asarray(shown, dtype=np.float64) - clicks_array,
            bucket=np.asarray(bucket, dtype=np.int64),
            weight=np.asarray(weights, dtype=np.float64),
            pairs=len(pairs),
        )


def fit(
    pairs: Sequence[Shown],
    weights: Sequence[float] | None = None,
    *,
    iterations: int = 300,
    tolerance: float = 1e-6,
) -> PositionModel:
    """Fit the model by expectation-maximisation to every (query, row) pair a log showed.

    ``weights`` counts identical pairs once (the never-clicked pairs of a log repeat a few
    shapes many times). Starts from a steep examination curve and a wanted click rate well
    above the unwanted one, so the "wanted" class is the one clicked more."""
    if not pairs:
        raise ValueError("fit needs at least one shown pair")
    data = _Entries.of(pairs, [1.0] * len(pairs) if weights is None else weights)
    if len(data.weight) != data.pairs:
        raise ValueError("one weight per pair")
    places = int(data.position.max()) + 1
    model = PositionModel(
        examination=1.0 / np.arange(1, places + 1) ** 0.5,
        click_wanted=0.5,
        click_unwanted=0.05,
        prior=np.full(places, 0.2),
        iterations=0,
    )
    weight = data.weight[data.pair]
    shown_weight = np.bincount(data.position, weight * (data.clicked + data.missed), places)
    pairs_weight = np.bincount(data.bucket, data.weight, places)
    for step in range(1, iterations + 1):
        wanted = model._posterior(data)
        share = wanted[data.pair]
        seen = model.examination[data.position]
        looked_sum = np.zeros(len(data.position))
        rates = []
        for rate, part in ((model.click_wanted, share), (model.click_unwanted, 1.0 - share)):
            # showings not clicked that were looked at, expected under this class
            looked = data.missed * seen * (1.0 - rate) / (1.0 - seen * rate)
            looked_sum += part * looked
            rates.append(
                np.sum(weight * part * data.clicked)
                / max(np.sum(weight * part * (data.clicked + looked)), EPSILON)
            )
        looked_at = np.bincount(data.position, weight * (data.clicked + looked_sum), places)
        examination = np.where(
            shown_weight > 0, looked_at / np.maximum(shown_weight, EPSILON), model.examination
        )
        scale = examination[0]  # the first place is looked at by everyone: the unit
        prior = (np.bincount(data.bucket, data.weight * wanted, places) + 1.0) / (
            pairs_weight + 2.0
        )
        updated = PositionModel(
            examination=np.clip(examination / scale, EPSILON, 1.0),
            click_wanted=float(np.clip(rates[0] * scale, EPSILON, 1.0 - EPSILON)),
            click_unwanted=float(np.clip(rates[1] * scale, EPSILON, 1.0 - EPSILON)),
            prior=np.clip(prior, EPSILON, 1.0 - EPSILON),
            iterations=step,
        )
        change = max(
            float(np.max(np.abs(updated.examination - model.examination))),
            abs(updated.click_wanted - model.click_wanted),
            abs(updated.click_unwanted - model.click_unwanted),
            float(np.max(np.abs(updated.prior - model.prior))),
        )
        model = updated
        if change < tolerance:
            break
    return model


def relevances(model: PositionModel, pairs: Sequence[Shown]) -> list[float]:
    """``model.relevance`` of each pair, computed together."""
    if not pairs:
        return []
    return model._posterior(_Entries.of(pairs, [1.0] * len(pairs))).tolist()


__all__ = ["PositionModel", "Shown", "fit", "relevances"]
