"""How good an encoder is: STS Spearman correlation and retrieval MRR / nDCG / Recall.

Both take anything with ``encode(texts, batch_size=..., normalize=True) -> (n, dim) array``
(a ``SentenceEncoder``), encode each distinct text once, and compare vectors by cosine.
``spearman`` and ``average_ranks`` are the rank statistics, in numpy alone (scipy's
``spearmanr`` and ``rankdata`` give the same numbers; the tests compare them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class Encodes(Protocol):
    def encode(self, texts: list[str], batch_size: int = ..., normalize: bool = ...) -> Any: ...


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``; tied values share the mean of the ranks they span.

    ``average_ranks([10, 20, 20, 30]) -> [1.0, 2.5, 2.5, 4.0]`` (scipy's ``rankdata``).
    """
    data = np.asarray(values, dtype=np.float64).ravel()  # (n,)
    order = np.argsort(data, kind="stable")
    ordered = data[order]
    # Start index of each run of equal values in sorted order, and one past the end.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(data)]
    # A run covering sorted positions s..e-1 holds ranks s+1..e, whose mean is (s + 1 + e) / 2.
    run_ranks = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(data), dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    return ranks


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y``: Pearson's r of their average ranks.

    Ties get average ranks, as scipy's ``spearmanr`` gives them. NaN when either side is
    constant (its ranks have no variance) or has fewer than two values.
    """
    a, b = average_ranks(x), average_ranks(y)
    if a.shape != b.shape:
        raise ValueError(f"spearman needs two sequences of one length, got {len(a)} and {len(b)}")
    if len(a) < 2:
        return float("nan")
    a -= a.mean()
    b -= b.mean()
    denominator = math.sqrt(float(a @ a) * float(b @ b))
    if denominator == 0.0:
        return float("nan")
    return max(-1.0, min(1.0, float(a @ b) / denominator))


class VectorCache:
    """An encoder that encodes each distinct text once: one model measured twice on one
    corpus (a run's eval figures, then its hybrid figures) pays for one encoding, and gets
    the very vectors the first measurement used.

    Only for one set of weights: a model that trains on needs a new cache. Other attributes
    are the wrapped encoder's.
    """

    def __init__(self, encoder: Encodes) -> None:
        self.encoder = encoder
        self._vectors: dict[tuple[str, bool], np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def encode(
        self, texts: str | Sequence[str], batch_size: int = 32, normalize: bool = True
    ) -> np.ndarray:
        """``(n, dim)`` float32 vectors (``(dim,)`` for one str), each text encoded once."""
        items = [texts] if isinstance(texts, str) else list(texts)
        missing = list(dict.fromkeys(t for t in items if (t, normalize) not in self._vectors))
        if missing:
            vectors = np.asarray(
                self.encoder.encode(missing, batch_size=batch_size, normalize=normalize),
                dtype=np.float32,
            )
            self._vectors.update(((t, normalize), v) for t, v in zip(missing, vectors, strict=True))
        if not items:
            return np.empty((0, self.encoder.dimensions), dtype=np.float32)  # type: ignore[attr-defined]
        out = np.stack([self._vectors[(t, normalize)] for t in items])
        return out[0] if isinstance(texts, str) else out


def _embed_unique(encoder: Encodes, texts: Iterable[str], batch_size: int) -> dict[str, np.ndarray]:
    unique = list(dict.fromkeys(texts))
    vectors = np.asarray(encoder.encode(unique, batch_size=batch_size, normalize=True))
    return dict(zip(unique, vectors, strict=True))


def sts_spearman(
    encoder: Encodes, pairs: Sequence[tuple[str, str, float]], batch_size: int = 32
) -> float:
    """Spearman rank correlation between cos(a, b) and the gold scores, in [-1, 1].

    This is the SBERT paper's STS measure (it reports it x 100). Any score scale works, as
    only the ranks count.
    """
    if len(pairs) < 2:
        raise ValueError("sts_spearman needs at least two (sentence_a, sentence_b, score) pairs")
    vectors = _embed_unique(encoder, (text for a, b, _ in pairs for text in (a, b)), batch_size)
    cosines = [float(np.dot(vectors[a], vectors[b])) for a, b, _ in pairs]
    gold = [float(score) for _, _, score in pairs]
    return spearman(cosines, gold)


def retrieval_metrics(
    encoder: Encodes,
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    relevant: Mapping[str, set[str]],
    k: int = 10,
    batch_size: int = 32,
) -> dict[str, Any]:
    """Rank the whole corpus by cosine for every query and score the top ``k``.

    Only queries that have at least one relevant document in ``relevant`` (and text in
    ``queries``) are scored; relevance is binary. Returns::

        {
            "mrr@10": float,       # mean reciprocal rank of the first relevant hit
            "ndcg@10": float,      # mean nDCG, DCG = sum 1/log2(rank + 1), as in BEIR
            "recall@10": float,    # mean share of a query's relevant documents found
            "precision@10": float, # mean share of the top k that is relevant
            "queries": int,        # how many queries were scored
            "per_query": {query_id: {"mrr@10": ..., "ndcg@10": ..., "recall@10": ...,
                                     "precision@10": ...}},
        }

    with the ``@10`` suffix following ``k``. Every value lies in [0, 1].
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    query_ids = [qid for qid in queries if relevant.get(qid)]
    if not query_ids:
        raise ValueError("No query has a relevant document: check the ids in `relevant`.")
    doc_ids = list(corpus)
    doc_vectors = np.asarray(
        encoder.encode([corpus[d] for d in doc_ids], batch_size=batch_size, normalize=True)
    )  # (docs, dim)
    query_vectors = np.asarray(
        encoder.encode([queries[q] for q in query_ids], batch_size=batch_size, normalize=True)
    )  # (queries, dim)
    scores = query_vectors @ doc_vectors.T  # (queries, docs)
    top = min(k, len(doc_ids))
    # Stable sort on the negated scores: ties go to the earlier document, reproducibly.
    ranked = np.argsort(-scores, axis=1, kind="stable")[:, :top]  # (queries, top)

    rankings = {qid: [doc_ids[j] for j in ranked[row]] for row, qid in enumerate(query_ids)}
    return ranking_metrics(rankings, relevant, k, corpus_size=len(doc_ids))


Relevance = Mapping[str, float] | Iterable[str]
"""A query's relevant documents: ``{doc_id: grade}`` (0 not relevant .. 3 perfect), or a set of
doc ids, each of grade 1."""

DEEP = 100  # the depth of the recall reported beside recall@k


def grades(relevance: Relevance) -> dict[str, float]:
    """``{doc_id: grade}`` of a query's relevance, a set's documents each graded 1."""
    if isinstance(relevance, Mapping):
        return dict(relevance)
    return dict.fromkeys(relevance, 1)


def ranking_metrics(
    rankings: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Relevance],
    k: int = 10,
    *,
    corpus_size: int | None = None,
) -> dict[str, Any]:
    """``retrieval_metrics``' figures for rankings made elsewhere (keyword, fused, a judgment
    list's searches): the one implementation of the ranking metrics.

    ``rankings`` maps each query id to its document ids, best first; a query id missing from
    it, or with no relevant document (grade above 0), is not scored. ``relevant`` gives each
    query's documents as a set (grade 1 each) or as ``{doc_id: grade}``; a document of grade
    0 counts as not relevant. nDCG's gain is the grade (DCG = sum grade / log2(rank + 1), as
    trec_eval's ``ndcg_cut``), divided by the DCG of the documents sorted by grade; MRR,
    recall and precision count the documents of grade above 0. ``corpus_size`` (when fewer
    than ``k`` documents could be ranked) caps the ideal ranking nDCG divides by.

    Returns the dict of ``retrieval_metrics`` plus ``no_relevant@10`` (the share of scored
    queries with no relevant document in their top ``k``) and, when the rankings go deeper
    than ``k`` to 100 documents (or to the whole corpus of ``corpus_size``), ``recall@100``
    in the summary and per query.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    graded = {qid: grades(relevant[qid]) for qid in rankings if relevant.get(qid)}
    query_ids = [qid for qid, g in graded.items() if any(grade > 0 for grade in g.values())]
    if not query_ids:
        raise ValueError("No query has a relevant document: check the ids in `relevant`.")
    longest = max(len(rankings[qid]) for qid in query_ids)
    deep = (
        k < DEEP
        and longest > k
        and (longest >= DEEP or (corpus_size is not None and longest >= corpus_size))
    )
    depth = k if corpus_size is None else min(k, corpus_size)
    per_query: dict[str, dict[str, float]] = {}
    for qid in query_ids:
        gold = graded[qid]
        relevant_count = sum(1 for grade in gold.values() if grade > 0)
        ranked = list(rankings[qid])
        gains = [gold.get(doc, 0) for doc in ranked[:k]]
        hits = [gain > 0 for gain in gains]
        first = next((rank for rank, hit in enumerate(hits, start=1) if hit), None)
        dcg = sum(
            gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1) if gain > 0
        )
        ideal = sorted((grade for grade in gold.values() if grade > 0), reverse=True)[:depth]
        idcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, start=1))
        per_query[qid] = {
            f"mrr@{k}": 1 / first if first else 0.0,
            f"ndcg@{k}": dcg / idcg,
            f"recall@{k}": sum(hits) / relevant_count,
            f"precision@{k}": sum(hits) / k,
        }
        if deep:
            found = sum(1 for doc in ranked[:DEEP] if gold.get(doc, 0) > 0)
            per_query[qid][f"recall@{DEEP}"] = found / relevant_count
    names = [f"mrr@{k}", f"ndcg@{k}", f"recall@{k}", f"precision@{k}"]
    if deep:
        names.append(f"recall@{DEEP}")
    result: dict[str, Any] = {
        name: float(np.mean([m[name] for m in per_query.values()])) for name in names
    }
    result[f"no_relevant@{k}"] = float(
        np.mean([m[f"recall@{k}"] == 0.0 for m in per_query.values()])
    )
    result["queries"] = len(per_query)
    result["per_query"] = per_query
    return result
