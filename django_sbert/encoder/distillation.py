"""Margin-MSE examples from a hybrid teacher: the encoder learns what word matching knows.

On a site's own text, hybrid search (vectors fused with keyword ranking) beats vectors alone:
rare words (a gene, a drug, a place) carry evidence a general-purpose encoder smooths away. A
run with no labels can teach the encoder that evidence. For each pseudo-query (a sentence cut
from a document, ``pseudo_queries.py``):

1. candidates: the encoder's nearest passages, BM25's best passages (``lexical.py``), and
   the query's own passage;
2. the teacher scores each candidate by linear fusion, ``w * (cos - lo) + (1 - w) * (hi - lo)
   * bm25 / bm25_max``, where ``lo``/``hi`` are the lowest/highest cosine among the
   candidates and ``w`` is ``dense_share``. The BM25 half is stretched to the encoder's own
   cosine spread, so the teacher reorders the candidates without asking for a wider spread
   (margins in raw cosine plus BM25 asked for one and cost 5 points of nDCG@10 on SciFact);
3. each example is ``(query, own passage, another candidate, teacher margin)``, for
   ``MarginMSELoss``: the student's cosine margin regresses the teacher's; ``per_query``
   other candidates (two) are drawn at random per query.

The own passage is not assumed relevant and the other candidate is not assumed irrelevant,
so a near-duplicate document (a false negative for in-batch or mined negatives) is only asked
to score as the teacher scores it. docs/training.md has the measurements.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from .evaluation import Encodes
from .lexical import BM25

DENSE_SHARE = 0.5  # the teacher's weight on the encoder's cosine; the rest is BM25's
CANDIDATES = 20  # per query, from each side (dense and BM25)
PER_QUERY = 2  # examples per query: the own passage against this many other candidates


def teacher_scores(cosines: np.ndarray, lexical: np.ndarray, dense_share: float) -> np.ndarray:
    """The teacher's scores of one query's candidates: linear fusion of the encoder's cosines
    and the BM25 scores (divided by their best), on the cosines' own scale and spread."""
    lo, hi = float(cosines.min()), float(cosines.max())
    best = float(lexical.max())
    relative = lexical / best if best > 0 else np.zeros_like(lexical)
    return dense_share * (cosines - lo) + (1 - dense_share) * (hi - lo) * relative


def lexical_teacher_examples(
    encoder: Encodes,
    pairs: Sequence[tuple[str, str]],
    *,
    dense_share: float = DENSE_SHARE,
    candidates: int = CANDIDATES,
    per_query: int = PER_QUERY,
    seed: int = 0,
    batch_size: int = 32,
) -> list[tuple[str, str, str, float]]:
    """``(query, own passage, other candidate, margin)`` examples for ``margin_mse`` from
    (pseudo-query, passage) pairs; the other candidates come from the pairs' passages.

    ``encoder`` is the model the run starts from (the student's own cosines are half the
    teacher). A query whose candidates hold nothing but its own passage gives no example.
    """
    if not 0 <= dense_share <= 1:
        raise ValueError(f"dense_share must be in [0, 1], got {dense_share!r}.")
    if candidates < 1 or per_query < 1:
        raise ValueError(
            f"candidates and per_query must be >= 1, got {candidates!r} and {per_query!r}."
        )
    passages = list(dict.fromkeys(passage for _, passage in pairs))
    own = {passage: index for index, passage in enumerate(passages)}
    queries = [query for query, _ in pairs]
    if not queries:
        return []
    query_vectors = encoder.encode(queries, batch_size=batch_size, normalize=True)
    passage_vectors = encoder.encode(passages, batch_size=batch_size, normalize=True)
    bm25 = BM25(passages)
    rng = random.Random(seed)
    top = min(candidates, len(passages))
    examples: list[tuple[str, str, str, float]] = []
    for (query, passage), vector in zip(pairs, query_vectors, strict=True):
        cosines = passage_vectors @ vector  # (passages,)
        lexical = bm25.scores(query)  # (passages,)
        chosen = {own[passage]}
        chosen.update(np.argpartition(-cosines, top - 1)[:top].tolist())
        chosen.update(np.argpartition(-lexical, top - 1)[:top].tolist())
        ids = np.array(sorted(chosen))
        scores = dict(
            zip(ids.tolist(), teacher_scores(cosines[ids], lexical[ids], dense_share), strict=True)
        )
        others = [i for i in ids.tolist() if i != own[passage]]
        for other in rng.sample(others, min(per_query, len(others))):
            margin = float(scores[own[passage]] - scores[other])
            examples.append((query, passage, passages[other], margin))
    return examples
