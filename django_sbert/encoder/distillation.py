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
3. each query gives one example, ``(query, own passage, other_1, ..., other_n, margins)``
   for ``MarginMSELoss``: the student's cosine margins regress the teacher's; ``per_query``
   other candidates are drawn at random (the query and its passage are embedded once for
   all of them).

The own passage is not assumed relevant and the other candidate is not assumed irrelevant,
so a near-duplicate document (a false negative for in-batch or mined negatives) is only asked
to score as the teacher scores it. docs/training.md has the measurements.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from .lexical import BM25
from .metrics import Encodes

DENSE_SHARE = 0.5  # the teacher's weight on the encoder's cosine; the rest is BM25's
CANDIDATES = 20  # per query, from each side (dense and BM25)
PER_QUERY = 4  # margins per query: the own passage against this many other candidates


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
) -> list[tuple]:
    """``(query, own passage, other_1, ..., other_n, [margin_1, ..., margin_n])`` examples
    for ``margin_mse`` from (pseudo-query, passage) pairs; the other candidates come from the
    pairs' passages.

    ``encoder`` is the model the run starts from (the student's own cosines are half the
    teacher). Every example has the same n: ``per_query``, or fewer when the pairs hold too
    few passages to give every query that many candidates (one passage gives no example).
    """
    if not 0 <= dense_share <= 1:
        raise ValueError(f"dense_share must be in [0, 1], got {dense_share!r}.")
    if candidates < 1 or per_query < 1:
        raise ValueError(
            f"candidates and per_query must be >= 1, got {candidates!r} and {per_query!r}."
        )
    passages = list(dict.fromkeys(passage for _, passage in pairs))
    own = {passage: index for index, passage in enumerate(passages)}
    top = min(candidates, len(passages))
    # Each side gives `top` candidates, at most one of them the own passage, so every query
    # has at least top - 1 others; a shape shared by all examples is what validation asks.
    others_each = min(per_query, top - 1)
    if not pairs or others_each < 1:
        return []
    queries = [query for query, _ in pairs]
    query_vectors = encoder.encode(queries, batch_size=batch_size, normalize=True)
    passage_vectors = encoder.encode(passages, batch_size=batch_size, normalize=True)
    bm25 = BM25(passages)
    rng = random.Random(seed)
    examples: list[tuple] = []
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
        others = rng.sample([i for i in ids.tolist() if i != own[passage]], others_each)
        margins = [float(scores[own[passage]] - scores[other]) for other in others]
        examples.append((query, passage, *(passages[other] for other in others), margins))
    return examples
