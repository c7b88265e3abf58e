"""Reciprocal rank fusion of a vector top-N and a keyword top-N, inside one SQL query.

``hybrid_search()`` joins the model's table to a derived table built when the query is
compiled, so every filter of the queryset (whether chained before or after ``hybrid_search()``)
applies to both candidate lists::

    SELECT article.*, f.score, f.vector_rank, f.keyword_rank, f.keyword_score,
           1 - (article.embedding <=> :q) AS similarity
    FROM article
    INNER JOIN (
        SELECT COALESCE(v.pk, t.pk) AS pk, v.rank AS vector_rank, t.rank AS keyword_rank,
               t.score AS keyword_score,
               COALESCE(:wv / (:k + v.rank), 0) + COALESCE(:wt / (:k + t.rank), 0) AS score
        FROM (SELECT pk, ROW_NUMBER() OVER (ORDER BY distance, pk) AS rank
              FROM (SELECT id, embedding <=> :q FROM article WHERE <filters>
                    AND embedding IS NOT NULL ORDER BY embedding <=> :q LIMIT :n) c (pk, distance)
             ) v                                         -- HNSW index scan
        FULL OUTER JOIN
             (SELECT pk, score, ROW_NUMBER() OVER (ORDER BY score DESC, pk) AS rank
              FROM (SELECT id, <keyword rank> FROM article WHERE <filters>
                    AND embedding_tsv @@ :tsq ORDER BY 2 DESC, id LIMIT :n) c (pk, score)
             ) t                                         -- GIN index (fulltext.py)
        ON v.pk = t.pk
    ) f ON f.pk = article.id
    WHERE <filters>
    ORDER BY f.score DESC, article.id

The fused score of a row is ``sum over sides of weight / (rrf_k + rank)``, with rank 1 for the
best row of a side; a row missing from a side's top-N gets nothing from it (Cormack, Clarke and
Buettcher 2009, with per-side weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Expression, F, FloatField, IntegerField, QuerySet, Value
from django.db.models.sql.constants import INNER
from django.db.models.sql.query import Query
from django.db.models.sql.where import AND, WhereNode
from pgvector.django import CosineDistance

from .. import fulltext

TABLE_NAME = "sbert_hybrid"


@dataclass(frozen=True)
class Fusion:
    """What the fused derived table needs besides the queryset's own filters."""

    vector_column: str  # the EmbeddingField's column
    vector_literal: str  # the query vector as pgvector text, '[0.1,0.2,...]'
    tsvector_column: str  # the generated <name>_tsv column
    text: str
    config: str
    match: str
    terms: tuple[fulltext.Term, ...]  # (lexeme, idf, df) of the text's words, for match="any"
    rrf_k: float
    vector_weight: float
    keyword_weight: float
    candidates: int
    # (column, value) pairs that keep the vector side to rows encoded by the query's encoder
    # version; empty for a vector passed in. A tuple, so that the dataclass stays hashable.
    vector_filter: tuple[tuple[str, str], ...] = ()


class FusedColumn(Expression):
    """A column of the fused derived table, e.g. ``"sbert_hybrid"."score"``."""

    contains_aggregate = False

    def __init__(self, alias: str, column: str, output_field: Any) -> None:
        super().__init__(output_field=output_field)
        self.alias = alias
        self.column = column

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        # Aliases as Django writes them (U0, T3 unquoted; a table name quoted), so they match.
        qn = compiler.quote_name_unless_alias
        return f"{qn(self.alias)}.{connection.ops.quote_name(self.column)}", []

    def relabeled_clone(self, change_map: dict[str, str]) -> FusedColumn:
        return FusedColumn(change_map.get(self.alias, self.alias), self.column, self.output_field)

    def get_group_by_cols(self) -> list[Expression]:
        return [self]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FusedColumn) and (self.alias, self.column) == (
            other.alias,
            other.column,
        )

    def __hash__(self) -> int:
        return hash((type(self), self.alias, self.column))


class FusedJoin:
    """``INNER JOIN (<fused top-N of both sides>) alias ON alias.pk = <table>.pk``.

    An entry of ``Query.alias_map`` (the interface of Django's ``Join``). Its SQL is built
    when the query is compiled, from the query's WHERE clause at that moment.
    """

    filtered_relation = None
    nullable = False

    def __init__(
        self,
        fusion: Fusion,
        pk_column: str,
        parent_alias: str,
        table_alias: str | None = None,
        join_type: str = INNER,
    ) -> None:
        self.fusion = fusion
        self.pk_column = pk_column
        self.table_name = TABLE_NAME
        self.parent_alias = parent_alias
        self.table_alias = table_alias
        self.join_type = join_type

    # -- the Join interface -----------------------------------------------------------------

    def relabeled_clone(self, change_map: dict[str, str]) -> FusedJoin:
        return FusedJoin(
            self.fusion,
            self.pk_column,
            change_map.get(self.parent_alias, self.parent_alias),
            change_map.get(self.table_alias, self.table_alias),
            self.join_type,
        )

    @property
    def identity(self) -> tuple[Any, ...]:
        return (type(self), self.fusion, self.parent_alias, self.table_alias)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FusedJoin):
            return NotImplemented
        return self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def promote(self) -> FusedJoin:
        return self  # every row of the result is in the fused table: the join stays INNER

    def demote(self) -> FusedJoin:
        return self

    # -- SQL --------------------------------------------------------------------------------

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        base = candidate_queryset(compiler.query, self.table_alias)
        vector_sql, vector_params = self._vector_side(base, connection)
        keyword_sql, keyword_params = self._keyword_side(base, connection)
        qn = compiler.quote_name_unless_alias
        f = self.fusion
        sql = (
            "INNER JOIN (SELECT COALESCE(v.pk, t.pk) AS pk, v.rank AS vector_rank, "
            "t.rank AS keyword_rank, t.score AS keyword_score, "
            "COALESCE(%s::float8 / (%s::float8 + v.rank), 0) "
            "+ COALESCE(%s::float8 / (%s::float8 + t.rank), 0) AS score "
            "FROM (SELECT c.pk, ROW_NUMBER() OVER (ORDER BY c.distance, c.pk) AS rank "
            f"FROM ({vector_sql}) AS c (pk, distance)) AS v "
            "FULL OUTER JOIN (SELECT c.pk, c.score, "
            "ROW_NUMBER() OVER (ORDER BY c.score DESC, c.pk) AS rank "
            f"FROM ({keyword_sql}) AS c (pk, score)) AS t ON v.pk = t.pk"
            f") {qn(self.table_alias)} "
            f"ON ({qn(self.table_alias)}.pk = "
            f"{qn(self.parent_alias)}.{connection.ops.quote_name(self.pk_column)})"
        )
        params = [
            float(f.vector_weight),
            float(f.rrf_k),
            float(f.keyword_weight),
            float(f.rrf_k),
            *vector_params,
            *keyword_params,
        ]
        return sql, params

    def _vector_side(self, base: QuerySet, connection: Any) -> tuple[str, tuple[Any, ...]]:
        f = self.fusion
        distance = CosineDistance(f.vector_column, Value(f.vector_literal))
        candidates = (
            base.filter(**{f"{f.vector_column}__isnull": False}, **dict(f.vector_filter))
            .annotate(_sbert_distance=distance)
            .order_by(distance)  # the operator of the HNSW index (vector_cosine_ops)
            .values_list("pk", "_sbert_distance")[: f.candidates]
        )
        return candidates.query.get_compiler(connection=connection).as_sql()

    def _keyword_side(self, base: QuerySet, connection: Any) -> tuple[str, tuple[Any, ...]]:
        f = self.fusion
        matches, rank = fulltext.keyword_filter_and_rank(
            f.tsvector_column, f.text, f.config, f.match, f.terms
        )
        candidates = (
            base.filter(matches)
            .annotate(_sbert_rank=rank)
            .order_by(F("_sbert_rank").desc(), "pk")
            .values_list("pk", "_sbert_rank")[: f.candidates]
        )
        return candidates.query.get_compiler(connection=connection).as_sql()


def candidate_queryset(outer: Query, alias: str) -> QuerySet:
    """The rows ``outer`` filters, without the fused join and what refers to it.

    Top-level conditions that refer to the fused table (``.filter(score__gt=...)``) are left to
    the outer query: the candidate lists only get broader, never wrong.
    """
    query = outer.chain()
    query.alias_refcount[alias] = 0
    query.where = _without_references(query.where, alias)
    query.clear_select_clause()
    query.clear_ordering(force=True)
    query.clear_limits()
    query.distinct = False
    query.distinct_fields = ()
    query.subquery = False
    query.explain_info = None
    query.annotations = {
        name: expression
        for name, expression in query.annotations.items()
        if not _refers_to(expression, alias)
    }
    return QuerySet(model=outer.model, query=query)


def _refers_to(node: Any, alias: str) -> bool:
    if isinstance(node, FusedColumn):
        return node.alias == alias
    children = getattr(node, "children", None)
    if children is None:
        children = node.get_source_expressions() if hasattr(node, "get_source_expressions") else []
        lhs, rhs = getattr(node, "lhs", None), getattr(node, "rhs", None)
        children = [*children, lhs, rhs]
    return any(child is not None and _refers_to(child, alias) for child in children)


def _without_references(where: WhereNode, alias: str) -> WhereNode:
    if not _refers_to(where, alias):
        return where
    if where.connector != AND or where.negated:
        return WhereNode()
    return WhereNode([child for child in where.children if not _refers_to(child, alias)], AND)


def fused_annotations(alias: str) -> dict[str, FusedColumn]:
    """``score``, ``vector_rank``, ``keyword_rank``, ``keyword_score`` of the fused table."""
    return {
        "score": FusedColumn(alias, "score", FloatField()),
        "vector_rank": FusedColumn(alias, "vector_rank", IntegerField()),
        "keyword_rank": FusedColumn(alias, "keyword_rank", IntegerField()),
        "keyword_score": FusedColumn(alias, "keyword_score", FloatField()),
    }
