"""The keyword side of a search (``keyword_search()``, ``hybrid_search()``'s keyword list): the
words of a text to look for, how they are ranked, and the filter that finds the rows holding
them. The SQL pieces are django_sbert.keyword's; the cap on the rows ranked is fusion.CappedMatch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.db import connections, models

from ..fields import EmbeddingField
from ..keyword import bm25, tsquery
from ..keyword.column import field_weights
from .fusion import CappedMatch, FusedJoin, Fusion, KeywordRows, prescore_terms
from .options import (
    SearchOptions,
    bm25_settings,
    keyword_max_df,
    keyword_rank,
    match_share,
    rescored_rows,
    search_options,
)

if TYPE_CHECKING:
    from .aio import PendingVector


@dataclass(frozen=True)
class KeywordPlan:
    """What a keyword search looks for: its terms ``(lexeme, idf, df)``, the BM25 parameters
    (None: the column has no statistics, ts_rank) and the share of rows a candidate's rarest
    words may cover."""

    terms: tuple[tsquery.Term, ...]
    bm25: bm25.Bm25 | None
    match_share: float
    # hybrid_search(): the keyword side's rows, ranked already (fusion.KeywordRows)
    rows: KeywordRows | None = None

    def applied_to(self, fusion: Fusion, **changes: Any) -> Fusion:
        """``fusion`` with this plan's terms, BM25 parameters and ranked rows (and ``changes``)."""
        terms, share, rows = self.terms, self.match_share, self.rows
        return replace(
            fusion, terms=terms, bm25=self.bm25, match_share=share, keyword_rows=rows, **changes
        )


def keyword_plan(
    queryset: models.QuerySet,
    embedding: EmbeddingField,
    text: str,
    match: str,
    max_df: float | None,
    rank: str | None = None,
    fusion: Fusion | None = None,
    encode: PendingVector | None = None,
) -> KeywordPlan:
    """The words of ``text`` to search for and how to rank them (one query, under the statement
    timeout like the search). BM25: ``(lexeme, idf, df)`` from the column's exact statistics, for
    either match; where the column has none (its triggers could not be installed): the terms of
    tsquery.query_terms for match="any", () for match="all".

    With ``fusion`` (hybrid_search(): the fused table's settings, its terms still to come)
    the plan also carries the keyword side's rows, ranked in the same transaction while
    ``encode``, the search text's vector, is encoded (``FusedJoin.keyword_rows_ahead``).
    """
    keyword_rank(rank)  # checked: BM25 is the one ranking
    if not text.strip():
        return KeywordPlan((), None, tsquery.MATCH_DF)
    connection = connections[queryset.db]
    options = SearchOptions.without_index_settings()
    with search_options(queryset.db, options, pipelined=True) as pipelined:
        plan = _terms(queryset.model, embedding, text, match, max_df, connection)
        if fusion is None:
            return plan
        alias = queryset.query.get_initial_alias()
        join = FusedJoin(plan.applied_to(fusion), queryset.model._meta.pk.column, alias)
        rows = join.keyword_rows_ahead(queryset.query, connection, encode, pipelined)
        return replace(plan, rows=rows)


def _terms(
    model: type[models.Model],
    embedding: EmbeddingField,
    text: str,
    match: str,
    max_df: float | None,
    connection: Any,
) -> KeywordPlan:
    """keyword_plan()'s terms and parameters, in the caller's transaction."""
    max_df = keyword_max_df(max_df)
    table = model._meta.db_table
    column = model._meta.get_field(embedding.tsvector_field_name).column
    configs = tsquery.query_configs(embedding.keyword_config)
    sources = embedding._keyword_source_fields(model) or ()
    terms, parameters = tsquery.bm25_terms(
        connection,
        bm25.relation_key(table, column),
        configs,
        text,
        max_df if match == "any" else 1.0,
        field_weights(sources, embedding.keyword_weights),
        **bm25_settings(),
    )
    if parameters is not None:
        return KeywordPlan(terms, parameters, match_share(parameters.rows))
    if match != "any":
        return KeywordPlan((), None, tsquery.MATCH_DF)
    terms = tsquery.query_terms(connection, table, column, configs[0], text, max_df)
    return KeywordPlan(terms, None, tsquery.MATCH_DF)


def keyword_filter(
    embedding: EmbeddingField,
    text: str,
    match: str,
    plan: KeywordPlan,
    k: int | None,
    max_rows: int,
) -> tuple[Any, Any]:
    """keyword_search()'s filter and rank (``keyword_score``): at most ``max_rows`` matching
    rows are ranked, however common the words; BM25 scores exactly the best by a quick score."""
    column, terms, share = embedding.tsvector_field_name, plan.terms, plan.match_share
    matches, rank_expression = tsquery.keyword_filter_and_rank(
        column, text, embedding.keyword_config, match, terms, plan.bm25, share
    )
    if isinstance(matches, tsquery.Matches):
        matches = CappedMatch(
            matches,
            max_rows,
            prescore=prescore_terms(terms, match, share) if plan.bm25 is not None else None,
            keep=rescored_rows(k),
            tsvector_column=column,
            require_condition=match == "all",
        )
    return matches, rank_expression


def check_keyword_search(field: EmbeddingField) -> EmbeddingField:
    """``field``, when it has a full-text column; else a ``ValueError`` saying how to add one."""
    if field.has_keyword_search:
        return field
    raise ValueError(
        f"{field.model._meta.label}.{field.name} has no full-text column: declare it with "
        f"EmbeddingField(..., keyword_search=True) and run makemigrations and migrate "
        f"(it adds the generated column {field.tsvector_field_name} and its GIN index)."
    )
