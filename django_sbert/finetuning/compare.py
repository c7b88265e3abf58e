"""Before and after: what two versions of an encoder return for the same queries, side by side.

::

    before = baseline_version(candidate)          # the serving version (or the one it replaced)
    queries = eval_queries(candidate)             # a few of its run's eval queries and answers
    rows = compare(candidate, before, queries)    # [Comparison(query, before=Side, after=Side)]

A candidate's vectors are not in the table before it is promoted, and searching must never
change what is served, so both versions rank the same bounded *pool* of texts, each encoded
here by each version: the serving version's top ``k`` rows for every query shown (within the
rows the caller may show: ``rows``) and the shown eval queries' positives. An eval query also
gets its nDCG@k on the pool for each version (relevance as in the run's eval corpus:
``gate.PositiveIndex``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import QuerySet

from ..encoder.metrics import ranking_metrics
from ..exceptions import CompareError
from ..indexing import FieldRef, field_refs
from ..models import EncoderVersion, TrainingPair, VersionStatus
from ..query import as_semantic
from ..serving import get_encoder, serving_record
from .gate import PositiveIndex, positive_pairs

K = 10  # results shown per version, and the cut-off of the per-query nDCG
EVAL_QUERIES = 5  # eval queries a page shows


@dataclass
class Hit:
    """One ranked text: ``row`` is the model instance it is the text of (None: a pair's
    positive, not a row)."""

    text: str
    score: float
    relevant: bool
    row: Any = None


@dataclass
class Side:
    version: str
    hits: list[Hit]
    ndcg: float | None  # None: no relevant text known for the query


@dataclass
class Comparison:
    query: str
    positives: list[str]
    before: Side
    after: Side

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.before, self.after

    @property
    def change(self) -> float | None:
        """nDCG after minus before (None when the query has no relevant text)."""
        if self.before.ndcg is None or self.after.ndcg is None:
            return None
        return self.after.ndcg - self.before.ndcg


def baseline_version(version: EncoderVersion) -> str:
    """What ``version`` is compared with: the serving version; for the serving version itself,
    the one it replaced (``CompareError`` when it replaced none)."""
    current = serving_record(version.encoder_name, max_age=0).version
    if current != version.version:
        return current
    if version.replaced:
        return version.replaced
    raise CompareError(f"{version} serves and replaced no other version: nothing to compare.")


def eval_queries(version: EncoderVersion, limit: int = EVAL_QUERIES) -> dict[str, list[str]]:
    """The first ``limit`` queries (by pair id) of the eval split of ``version``'s run, each
    with its positives; empty for a version without a run or without eval pairs."""
    run = version.run
    if run is None or not run.data.get("eval"):
        return {}
    pairs = TrainingPair.objects.filter(pk__in=run.data["eval"]).order_by("pk")
    queries: dict[str, list[str]] = {}
    for pair in positive_pairs(pairs):
        if pair.text_a in queries:
            queries[pair.text_a].append(pair.text_b)
        elif len(queries) < limit:
            queries[pair.text_a] = [pair.text_b]
    return queries


def _encoder(name: str, version: str) -> Any:
    """The model of ``version``, or ``CompareError`` saying why it cannot be loaded here."""
    try:
        return get_encoder(name, version)
    except LookupError as exc:
        raise CompareError(f"No version {version} of encoder {name!r} is recorded.") from exc
    except Exception as exc:  # VersionUnavailable, or files that do not load
        raise CompareError(
            f"The files of version {version} cannot be loaded on this host: {exc}"
        ) from exc


Rows = Callable[[FieldRef], "QuerySet[Any] | None"]  # a field's rows one may show; None: none


def all_rows(ref: FieldRef) -> QuerySet[Any]:
    """Every row of ``ref``'s table (for code; the admin passes what the user may see)."""
    return ref.manager.all()


def _top_rows(encoder_name: str, query: str, k: int, rows: Rows) -> list[tuple[str, Any]]:
    """(text, row) of the serving version's top ``k`` rows for ``query``, over every field of
    ``encoder_name`` whose ``rows(ref)`` is not None, searched within those rows only (read
    from the live table, as a search would)."""
    found: list[tuple[float, str, Any]] = []
    for ref in field_refs():
        if ref.encoder_name != encoder_name:
            continue
        allowed = rows(ref)
        if allowed is None:
            continue
        for row in as_semantic(allowed).similar_to(query, k=k, field=ref.name):
            text = ref.field.get_source_text(row).strip()
            if text:
                found.append((float(row.similarity), text, row))
    found.sort(key=lambda item: -item[0])
    return [(text, row) for _, text, row in found[:k]]


def compare(
    version: EncoderVersion,
    before: str,
    queries: Mapping[str, Sequence[str]],
    k: int = K,
    rows: Rows = all_rows,
) -> list[Comparison]:
    """Rank the pool (see the module) for each query with ``before`` and with ``version``.

    ``queries`` maps each query to its positives (empty for a typed query). ``rows(ref)``
    gives the rows of a field that may enter the pool (None: leave the field out); the admin
    passes its ModelAdmin's ``get_queryset(request)`` where the user may view the model.
    Raises ``CompareError`` when either version's files cannot be loaded on this host.
    """
    name = version.encoder_name
    models = {"before": _encoder(name, before), "after": _encoder(name, version.version)}
    pool: dict[str, Any] = {}
    for query, positives in queries.items():
        for text, row in _top_rows(name, query, k, rows):
            pool.setdefault(text, row)
        for text in positives:
            pool.setdefault(text.strip(), None)
    texts = [text for text in pool if text]
    query_texts = list(queries)
    gold = {q: _relevant(texts, queries[q]) for q in query_texts}
    sides: dict[str, list[Side]] = {}
    for side, v in (("before", before), ("after", version.version)):
        model = models[side]
        sides[side] = []
        if texts:
            corpus = np.asarray(model.encode(texts, normalize=True), dtype=np.float32)
            asked = np.asarray(model.encode(query_texts, normalize=True), dtype=np.float32)
        for row, query in enumerate(query_texts):
            hits: list[Hit] = []
            if texts:
                scores = corpus @ asked[row]
                hits = [
                    Hit(texts[i], float(scores[i]), texts[i] in gold[query], pool[texts[i]])
                    for i in np.argsort(-scores, kind="stable")[:k]
                ]
            ndcg = None
            if gold[query]:
                ranking = {query: [hit.text for hit in hits]}
                ndcg = float(ranking_metrics(ranking, {query: gold[query]}, k=k)[f"ndcg@{k}"])
            sides[side].append(Side(v, hits, ndcg))
    return [
        Comparison(query, list(queries[query]), sides["before"][row], sides["after"][row])
        for row, query in enumerate(query_texts)
    ]


def _relevant(texts: Sequence[str], positives: Sequence[str]) -> set[str]:
    """The texts of the pool relevant to a query with ``positives``: a positive itself, or a
    text that holds one (``gate.PositiveIndex``)."""
    holds = PositiveIndex(positives)
    given = {p.strip() for p in positives}
    return {text for text in texts if text in given or holds(text)}


def version_label(version: str) -> str:
    """``version`` with its status when it is recorded: ``abc123 (active)``."""
    status = EncoderVersion.objects.filter(version=version).values_list("status", flat=True)
    known = status.first()
    if known is None:
        return f"{version} (the settings' model)"
    return f"{version} ({VersionStatus(known).label})"
