"""Vector, keyword and hybrid search measured on an eval split, and the fusion chosen there.

::

    figures = hybrid_metrics(encoder, eval_pairs)
    # {"keyword_ndcg@10": .., "hybrid_ndcg@10": .., "tuned_ndcg@10": .., "fusion_used": 1.0,
    #  "heldout_queries": 150, "heldout_hybrid_ndcg@10": .., "heldout_tuned_ndcg@10": ..,
    #  "candidate_fusion_method": "linear", ..., "fusion_method": "linear", "fusion_rrf_k": 60.0,
    #  "fusion_vector_weight": 0.7, "fusion_keyword_weight": 0.3}

A fine-tuned encoder's vector side can be much stronger than the keyword side, and fused with
equal weights the keyword side pulls its good results down; and the fusion that suits one
site's queries need not suit another's. So when a run evaluates its candidate
(``execution._train``), the eval split is ranked by vectors, by keywords and fused. Its
queries are split in two by a hash of their text (``split_queries``): a fusion is chosen on
the first part over a small grid (the site's settings first), and measured against the
settings' on the second, the queries it was not chosen on (``choose_fusion``). Only where it
ranks those better is it stored in the version's metrics (``fusion_*`` keys) and used while
that version serves (``serving.Serving.fusion``; docs/hybrid.md, "The fusion a site's own
evidence chose"); otherwise the version keeps the settings' fusion, and the candidate is
stored beside it (``candidate_fusion_*``) for the admin and the API to show.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from django.db import connections, router, transaction

from ..conf import sbert_settings
from ..encoder.metrics import Encodes, grades, ranking_metrics
from ..fields import all_embedding_fields
from ..keyword import bm25, tsquery
from ..keyword.column import DEFAULT_CONFIG
from ..models import TrainingPair
from ..query.options import match_share
from ..serving import FUSION_KEYS
from .gate import eval_metrics, positive_pairs, ranking_task

logger = logging.getLogger(__name__)

RRF_KS = (1.0, 5.0, 10.0, 30.0, 60.0, 100.0)
KEYWORD_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)  # against vector weight 1
# Linear fusion's vector weight alpha (keyword weight 1 - alpha): 0.05 to 1 in steps of 0.05.
ALPHAS = tuple(round(0.05 * step, 2) for step in range(1, 21))
K = 10  # the metrics' cut-off, as eval_metrics
# The share of the queries a fusion is chosen on; the rest judge it against the settings'.
TUNE_SHARE = 0.5
# Fewer queries left to judge it than this: too few to tell, the settings' fusion stays.
MIN_HELD_OUT = 10

Scored = Sequence[tuple[str, float]]  # (id, score) best first: one side's candidate list


def site_fusion() -> dict[str, Any]:
    """The fusion ``SBERT["SEARCH"]["FUSION"]`` gives (``METHOD``, ``RRF_K``,
    ``VECTOR_WEIGHT``, ``KEYWORD_WEIGHT``)."""
    search = sbert_settings.SEARCH["FUSION"]
    return {
        "fusion": str(search["METHOD"]),
        "rrf_k": float(search["RRF_K"]),
        "vector_weight": float(search["VECTOR_WEIGHT"]),
        "keyword_weight": float(search["KEYWORD_WEIGHT"]),
    }


def fusion_grid(default: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fusions tried: ``default`` first, then reciprocal rank fusion at every ``RRF_KS`` x
    ``KEYWORD_WEIGHTS`` (vector weight 1), then linear fusion at every ``ALPHAS``."""
    grid = [dict(default)]
    options = [
        {"fusion": "rrf", "rrf_k": rrf_k, "vector_weight": 1.0, "keyword_weight": weight}
        for rrf_k in RRF_KS
        for weight in KEYWORD_WEIGHTS
    ]
    options += [
        {
            "fusion": "linear",
            "rrf_k": float(default["rrf_k"]),  # unused by linear fusion; kept as the site's
            "vector_weight": alpha,
            "keyword_weight": round(1.0 - alpha, 2),
        }
        for alpha in ALPHAS
    ]
    grid += [option for option in options if option != grid[0]]
    return grid


def fuse(
    vector: Scored,
    keyword: Scored,
    *,
    fusion: str = "rrf",
    rrf_k: float,
    vector_weight: float,
    keyword_weight: float,
) -> list[str]:
    """Ids of both candidate lists by ``hybrid_search()``'s fused score (query/fusion.py),
    best first; ties go to the smaller id.

    ``vector``: (id, cosine similarity), ``keyword``: (id, keyword score), each best first.
    ``"rrf"``: ``weight / (rrf_k + rank)`` summed over the lists; ``"linear"``: each side's
    score normalised within its list (cosine min-max, keyword score over the best one) times
    its weight, summed.
    """
    scores: dict[str, float] = {}
    if fusion == "linear":
        if vector:
            high, low = vector[0][1], vector[-1][1]
            for doc, cosine in vector:
                share = (cosine - low) / (high - low) if high > low else 1.0
                scores[doc] = scores.get(doc, 0.0) + vector_weight * share
        best = keyword[0][1] if keyword else 0.0
        for doc, score in keyword:
            share = score / best if best > 0 else 0.0
            scores[doc] = scores.get(doc, 0.0) + keyword_weight * share
    else:
        for weight, ranked in ((vector_weight, vector), (keyword_weight, keyword)):
            for rank, (doc, _) in enumerate(ranked, start=1):
                scores[doc] = scores.get(doc, 0.0) + weight / (rrf_k + rank)
    return sorted(scores, key=lambda doc: (-scores[doc], doc))


def split_queries(ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """``ids`` in two parts, (tuning, held out), by the sha256 of each id: a query tunes when
    its hash, read as a fraction, is under ``TUNE_SHARE``, so it falls on the same side
    whatever else the set holds, and a set that grows keeps its held-out queries held out.
    Each part in sorted order."""

    def share(qid: str) -> float:
        return int(hashlib.sha256(str(qid).encode()).hexdigest()[:12], 16) / 16**12

    tuning = sorted(qid for qid in ids if share(qid) < TUNE_SHARE)
    held = sorted(qid for qid in ids if share(qid) >= TUNE_SHARE)
    return tuning, held


def choose_fusion(
    vector: Mapping[str, Scored],
    keyword: Mapping[str, Scored],
    relevant: Mapping[str, Mapping[str, int]],
    current: Mapping[str, Any],
    corpus_size: int | None = None,
) -> dict[str, Any]:
    """The fusion of ``fusion_grid(current)`` that ranks the tuning part of the queries best
    (``current`` on a tie, else the earlier), and whether it ranked the held-out part better
    than ``current`` (the settings' fusion, or the one a version uses now).

    Returns ``{"candidate": options, "used": bool, "tuned_on": n, "heldout_queries": n,
    "heldout_current": nDCG@10, "heldout_candidate": nDCG@10}`` (the held-out figures None
    with fewer than ``MIN_HELD_OUT`` held-out queries; ``used`` is then False).
    ``vector`` / ``keyword``: each query's candidate lists, (id, score) best first.
    """
    asked = [
        qid
        for qid in vector
        if any(grade > 0 for grade in grades(relevant.get(qid) or {}).values())
    ]
    tuning, held = split_queries(asked)

    def ndcg(options: Mapping[str, Any], ids: Sequence[str]) -> float:
        fused = {q: fuse(vector[q], keyword.get(q, []), **options) for q in ids}
        return ranking_metrics(fused, relevant, K, corpus_size=corpus_size)[f"ndcg@{K}"]

    candidate, best = dict(current), ndcg(current, tuning) if tuning else 0.0
    for option in fusion_grid(current)[1:] if tuning else []:
        figure = ndcg(option, tuning)
        if figure > best + 1e-12:
            candidate, best = option, figure
    out: dict[str, Any] = {
        "candidate": candidate,
        "used": False,
        "tuned_on": len(tuning),
        "heldout_queries": len(held),
        "heldout_current": None,
        "heldout_candidate": None,
    }
    if len(held) >= MIN_HELD_OUT:
        out["heldout_current"] = ndcg(current, held)
        out["heldout_candidate"] = ndcg(candidate, held)
        out["used"] = out["heldout_candidate"] > out["heldout_current"] + 1e-12
    return out


def vector_rankings(
    encoder: Encodes, queries: Mapping[str, str], corpus: Mapping[str, str], depth: int
) -> dict[str, list[tuple[str, float]]]:
    """Each query's ``depth`` nearest corpus ids by cosine, with their cosine similarity,
    best first (ties: earlier id)."""
    doc_ids = list(corpus)
    docs = np.asarray(encoder.encode([corpus[d] for d in doc_ids], normalize=True))  # (n, dim)
    ids = list(queries)
    vectors = np.asarray(encoder.encode([queries[q] for q in ids], normalize=True))  # (q, dim)
    similarity = vectors @ docs.T  # (q, n)
    ranked = np.argsort(-similarity, axis=1, kind="stable")[:, :depth]  # (q, depth)
    return {
        q: [(doc_ids[j], float(similarity[row, j])) for j in ranked[row]]
        for row, q in enumerate(ids)
    }


_CREATE = (
    "CREATE TEMPORARY TABLE sbert_eval_docs (id text PRIMARY KEY, tsv tsvector) ON COMMIT DROP"
)
_FILL = (
    "INSERT INTO sbert_eval_docs (id, tsv) SELECT d.id, to_tsvector(%s::regconfig, d.body) "
    "FROM unnest(%s::text[], %s::text[]) AS d (id, body)"
)
_DF = "SELECT word, ndoc FROM ts_stat('SELECT tsv FROM sbert_eval_docs')"


def keyword_rankings(
    queries: Mapping[str, str],
    corpus: Mapping[str, str],
    depth: int,
    *,
    config: str = DEFAULT_CONFIG,
    match: str = "any",
    max_df: float = 0.2,
    using: str | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """Each query's ``depth`` best corpus ids by PostgreSQL full-text search, with their
    keyword score, best first.

    The ranking of ``keyword_search()`` (keyword/): BM25 with the document frequencies
    counted exactly over ``corpus``; ``match="any"`` ranks rows holding one of the query's
    rarest words, ``match="all"`` asks for every word (``websearch_to_tsquery``). The corpus
    lives in a temporary table for the duration of one transaction, on the primary
    (``db_for_write``): a read replica, or any read-only connection, refuses
    ``CREATE TEMPORARY TABLE``.
    """
    alias = using or router.db_for_write(TrainingPair)
    ids = list(corpus)
    rankings: dict[str, list[tuple[str, float]]] = {}
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_CREATE)
        cursor.execute(_FILL, [config, ids, [corpus[d] for d in ids]])
        cursor.execute(_DF)
        df = {word: count / max(1, len(ids)) for word, count in cursor.fetchall()}
        parameters = _bm25_parameters(cursor, len(ids))
        for qid, text in queries.items():
            rankings[qid] = _bm25_ranking(
                cursor, parameters, config, text, df, match, max_df, depth
            )
        cursor.execute("DROP TABLE sbert_eval_docs")
    return rankings


def _bm25_parameters(cursor: Any, rows: int) -> bm25.Bm25:
    """BM25 over the temporary table's one field (weight D), with ``SEARCH["KEYWORD"]``'s k1
    and b."""
    search = sbert_settings.SEARCH["KEYWORD"]
    cursor.execute("SELECT COALESCE(sum(length(tsv)), 0) FROM sbert_eval_docs")
    total = int(cursor.fetchone()[0])
    b = search["B"]
    b = b.get("B", 0.75) if isinstance(b, Mapping) else b  # the body's, as a site's field
    return bm25.parameters(["D"], {"D": total}, rows, search["K1"], b, {"D": 1.0})


def _bm25_ranking(
    cursor: Any,
    parameters: bm25.Bm25,
    config: str,
    text: str,
    df: Mapping[str, float],
    match: str,
    max_df: float,
    depth: int,
) -> list[tuple[str, float]]:
    """One query's ``depth`` best ids by BM25 (bm25.py), the statistics exact over the
    corpus; ``match`` and the candidate restriction as ``keyword_search()``."""
    terms = _terms(cursor, config, text, df, max_df if match == "any" else 1.0, parameters.rows)
    if not terms:
        return []
    score, params = parameters.score_sql(
        "sbert_eval_docs.tsv", [(lex, idf) for lex, idf, _ in terms]
    )
    if match == "all":
        where, where_params = "tsv @@ websearch_to_tsquery(%s::regconfig, %s)", [config, text]
    else:
        share = match_share(parameters.rows)
        where = "tsv @@ %s::tsquery"
        where_params = [tsquery.tsquery_literal(tsquery.matching_lexemes(terms, share))]
    cursor.execute(
        f"SELECT id, {score} AS score FROM sbert_eval_docs WHERE {where} "
        "ORDER BY score DESC, id LIMIT %s",
        [*params, *where_params, depth],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _terms(
    cursor: Any, config: str, text: str, df: Mapping[str, float], max_df: float, rows: int
) -> list[tsquery.Term]:
    """``(lexeme, idf, df)`` as ``tsquery.bm25_terms`` finds them, the document frequencies
    exact over the corpus of ``rows`` (words of no document: gone)."""
    cursor.execute(tsquery.LEXEMES_SQL, [config, text])
    weighted = sorted((df[lexeme], lexeme) for (lexeme,) in cursor.fetchall() if df.get(lexeme))
    kept = [item for item in weighted if item[0] <= max_df] or weighted[:1]
    return [
        (lexeme, bm25.idf(rows, round(share * rows)), share)
        for share, lexeme in kept[: tsquery.MAX_TERMS]
    ]


def keyword_config(encoder_name: str) -> str:
    """The text search configuration of the first keyword-searchable field of the encoder,
    else ``DEFAULT_CONFIG``."""
    for _, field in all_embedding_fields():
        if field.encoder == encoder_name and field.keyword_search:
            return tsquery.query_configs(field.keyword_config)[0]
    return DEFAULT_CONFIG


def hybrid_metrics(
    encoder: Encodes,
    pairs: Sequence[TrainingPair],
    encoder_name: str = "default",
    distractors: Sequence[str] = (),
) -> dict[str, float]:
    """Keyword and hybrid nDCG@10 / Recall@10 on the positive ``pairs`` (ranked against their
    texts and ``distractors``, the corpus ``gate.eval_metrics`` ranks), with the site's fusion
    (``hybrid_*``) and the fusion ``choose_fusion`` tuned on part of the queries (``tuned_*``
    over all of them, ``heldout_*`` on those it was not tuned on, ``candidate_fusion_*``);
    ``fusion_*``, which serving reads, only where the tuned one won on the held-out queries;
    {} without positive pairs. The keyword side analyses text as the encoder's fields do
    (``keyword_config``).
    """
    positives = positive_pairs(pairs)
    if not positives:
        return {}
    queries, corpus, relevant = ranking_task(positives, distractors)
    search = sbert_settings.SEARCH
    depth = int(search["FUSION"]["CANDIDATES"])
    vector = vector_rankings(encoder, queries, corpus, depth)
    # Short ids in the temporary table: a long text as its key exceeds a btree entry's size.
    texts = list(corpus)
    by_id = {f"{i:08d}": text for i, text in enumerate(texts)}
    ranked_ids = keyword_rankings(
        queries,
        {doc_id: corpus[text] for doc_id, text in by_id.items()},
        depth,
        config=keyword_config(encoder_name),
        match=str(search["KEYWORD"]["MATCH"]),
        max_df=float(search["KEYWORD"]["MAX_DF"]),
    )
    keyword = {
        q: [(by_id[doc_id], score) for doc_id, score in ranked] for q, ranked in ranked_ids.items()
    }

    def scored(fusion: Mapping[str, Any]) -> dict[str, Any]:
        fused = {q: fuse(vector[q], keyword.get(q, []), **fusion) for q in queries}
        return ranking_metrics(fused, relevant, K, corpus_size=len(corpus))

    default = site_fusion()
    choice = choose_fusion(vector, keyword, relevant, default, corpus_size=len(corpus))
    candidate = choice["candidate"]
    default_metrics, candidate_metrics = scored(default), scored(candidate)
    words = ranking_metrics(
        {q: [doc for doc, _ in ranked] for q, ranked in keyword.items()},
        relevant,
        K,
        corpus_size=len(corpus),
    )
    figures: dict[str, Any] = {
        f"keyword_ndcg@{K}": words[f"ndcg@{K}"],
        f"keyword_recall@{K}": words[f"recall@{K}"],
        f"hybrid_ndcg@{K}": default_metrics[f"ndcg@{K}"],
        f"hybrid_recall@{K}": default_metrics[f"recall@{K}"],
        f"tuned_ndcg@{K}": candidate_metrics[f"ndcg@{K}"],
        f"tuned_recall@{K}": candidate_metrics[f"recall@{K}"],
        **held_out_figures(choice),
        **fusion_metrics(candidate, "candidate_fusion_"),
    }
    if choice["used"]:  # what serving reads: only a fusion that won on held-out queries
        figures.update(fusion_metrics(candidate))
    return figures


def fusion_metrics(fusion: Mapping[str, Any], prefix: str = "fusion_") -> dict[str, Any]:
    """A fusion as a version's metrics: ``<prefix>method`` and ``<prefix><key>`` for each of
    ``FUSION_KEYS`` (with the default prefix, what serving reads: ``versions.stored_fusion``)."""
    return {
        f"{prefix}method": str(fusion["fusion"]),
        **{f"{prefix}{key}": float(fusion[key]) for key in FUSION_KEYS},
    }


def held_out_figures(choice: Mapping[str, Any]) -> dict[str, Any]:
    """``choose_fusion``'s verdict as metrics: ``fusion_used`` (1.0: the tuned fusion serves,
    0.0: the settings'), the queries it was tuned on and judged on, and both fusions' nDCG@10
    on the held-out ones (absent when there were too few)."""
    out = {
        "fusion_used": 1.0 if choice["used"] else 0.0,
        "tuned_on_queries": float(choice["tuned_on"]),
        "heldout_queries": float(choice["heldout_queries"]),
    }
    if choice["heldout_current"] is not None:
        out[f"heldout_hybrid_ndcg@{K}"] = float(choice["heldout_current"])
        out[f"heldout_tuned_ndcg@{K}"] = float(choice["heldout_candidate"])
    return out


def candidate_metrics(
    encoder: Encodes,
    pairs: Sequence[TrainingPair],
    encoder_name: str = "default",
    measured: Mapping[str, float] | None = None,
    distractors: Sequence[str] = (),
) -> dict[str, float]:
    """What a run records for a model on its eval split: ``gate.eval_metrics`` (what the gate
    compares; ``measured`` when early stopping already measured this model) and
    ``hybrid_metrics`` (keyword and hybrid figures, the fusion chosen), both ranking against
    the eval positives and ``distractors``.

    A failure of the hybrid part (the database refusing a temporary table, say) leaves those
    figures out, so the fusion stays the site's settings; it is logged and recorded as
    ``hybrid_error`` (shown with the version's search metrics in the admin and the API).
    """
    metrics = dict(measured) if measured is not None else eval_metrics(encoder, pairs, distractors)
    if "ndcg@10" not in metrics:
        return metrics
    try:
        metrics.update(hybrid_metrics(encoder, pairs, encoder_name, distractors))
    except Exception as exc:
        logger.exception("django-sbert: measuring hybrid search on the eval split failed")
        metrics["hybrid_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return metrics
