"""Fusion of a vector top-N and a keyword top-N, inside one SQL query.

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
        FROM (SELECT pk, distance, ROW_NUMBER() OVER (ORDER BY distance, pk) AS rank,
                     MIN(distance) OVER () AS nearest, MAX(distance) OVER () AS farthest
              FROM (SELECT id, embedding <=> :q FROM article WHERE <filters>
                    AND embedding IS NOT NULL ORDER BY embedding <=> :q LIMIT :n) c (pk, distance)
             ) v                                         -- HNSW index scan
        FULL OUTER JOIN
             (SELECT pk, score, ROW_NUMBER() OVER (ORDER BY score DESC, pk) AS rank,
                     MAX(score) OVER () AS best
              FROM (SELECT id, <keyword rank> FROM article WHERE <filters>
                    AND id = ANY(ARRAY(SELECT id FROM article WHERE <filters>
                                       AND embedding_tsv @@ :tsq LIMIT :max_rows))
                    ORDER BY 2 DESC, id LIMIT :n) c (pk, score)
             ) t                                         -- GIN index (keyword/column.py)
        ON v.pk = t.pk
    ) f ON f.pk = article.id
    WHERE <filters>
    ORDER BY f.score DESC, article.id

(the ``score`` of ``fusion="rrf"``; ``"linear"`` below). The keyword side ranks at most
``max_rows`` matching rows (``CappedMatch``, also what ``keyword_search()`` filters with):
however common the words, the costly part, ranking, stays bounded.

``hybrid_search()`` runs the keyword side ahead, on its own, while the query text is being
encoded in another thread (``KeywordRows``): the database ranks words while torch encodes, on
the other core. The fused statement then reads that list as two arrays instead of ranking
again, but only where its keyword side compiles to exactly the statement that ran ahead (same
SQL, same parameters): a filter chained after ``hybrid_search()`` changes it, and the keyword
side then runs inside the fused statement as above.

Two fusions (``serving.FUSIONS``), ``"rrf"`` and ``"linear"``, whose formulas docs/hybrid.md
("Fusion") gives; a row missing from a side's top-N gets nothing from that side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from django.core.exceptions import EmptyResultSet, FullResultSet
from django.db.models import (
    BooleanField,
    Expression,
    F,
    FloatField,
    IntegerField,
    QuerySet,
    TextField,
)
from django.db.models.expressions import RawSQL
from django.db.models.sql.constants import INNER
from django.db.models.sql.query import Query
from django.db.models.sql.where import AND, WhereNode
from pgvector.django import CosineDistance

from ..keyword import bm25, tsquery
from .options import FusionConfig, keyword_max_rows, rescored_rows, tuned_fusion
from .vectors import QuerySource, QueryVector, same_version

if TYPE_CHECKING:
    from .aio import PendingVector


def alias_quoter(compiler: Any) -> Callable[[str], str]:
    """The compiler's way of writing a table alias, so that ours match the ones it writes:
    Django 6.1 quotes every alias (``SQLCompiler.quote_name``, and deprecates
    ``quote_name_unless_alias``); 5.2 leaves its own aliases (U0, T3) unquoted."""
    quote_name = getattr(compiler, "quote_name", None)  # Django >= 6.1
    return quote_name if quote_name is not None else compiler.quote_name_unless_alias


TABLE_NAME = "sbert_hybrid"
# Set on a query (explain()) whose keyword side is ranked inside the fused statement, even
# where a list ranked ahead would answer it: the plan then shows the whole search.
KEYWORDS_INSIDE = "_sbert_keywords_inside"

# The fused score of each fusion, in SQL over the two numbered candidate lists v and t; its
# parameters, in order: vector_weight, rrf_k, keyword_weight, rrf_k.
_RRF_SCORE = (
    "COALESCE(%s::float8 / (%s::float8 + v.rank), 0) "
    "+ COALESCE(%s::float8 / (%s::float8 + t.rank), 0)"
)
# Parameters: vector_weight, keyword_weight. A row outside the vector list (v.pk NULL) gets
# nothing from it; equally near vector candidates all get 1. NULLIF: a list whose best
# keyword score is 0 adds nothing (rather than dividing by 0).
_LINEAR_SCORE = (
    "%s::float8 * CASE WHEN v.pk IS NULL THEN 0 WHEN v.farthest > v.nearest "
    "THEN (v.farthest - v.distance) / (v.farthest - v.nearest) ELSE 1 END "
    "+ COALESCE(%s::float8 * t.score / NULLIF(t.best, 0), 0)"
)


@dataclass(frozen=True)
class Fusion:
    """What the fused derived table needs besides the queryset's own filters."""

    vector_column: str  # the EmbeddingField's column
    vector_literal: str  # the query vector as pgvector text, '[0.1,0.2,...]'
    tsvector_column: str  # the generated <name>_tsv column
    text: str
    config: str
    match: str
    terms: tuple[tsquery.Term, ...]  # (lexeme, idf, df) of the text's words, for match="any"
    rrf_k: float
    vector_weight: float
    keyword_weight: float
    candidates: int
    fusion: str = "rrf"  # one of serving.FUSIONS
    # (column, value) pairs that keep the vector side to rows encoded by the query's encoder
    # version; empty for a vector passed in. A tuple, so that the dataclass stays hashable.
    vector_filter: tuple[tuple[str, Any], ...] = ()
    # Where the query vector came from (vectors.QuerySource), so a retry after a switch can
    # compile the vector side with the new version's vector; None for a vector passed in.
    source: QuerySource | None = None
    # The most rows the keyword side ranks (options.KEYWORD_MAX_ROWS); None: all.
    max_rows: int | None = None
    # A field with passages=: the vector side ranks rows by their best passage
    # (query/passages.PassageSearch); None: by the rows' own vectors.
    passages: Any = None
    # A field with binary_index=True: (condition, distance) of query/binary.reranked(), which
    # take the candidates by Hamming distance and rank them by exact cosine; None: the float
    # vectors, through their own index.
    binary: Any = None
    # The column's BM25 parameters (bm25.Bm25); None: it has no statistics (ts_rank).
    bm25: Any = None
    # BM25: the share of rows a candidate's rarest words may cover (tsquery.matching_lexemes)
    match_share: float = tsquery.MATCH_DF
    # BM25: candidates that get the exact score, the best by a quick score (CappedMatch)
    rescore: int | None = None
    # The keyword side's rows, ranked ahead while the text was encoded; None: rank them here.
    keyword_rows: KeywordRows | None = None


def served_fusion(config: FusionConfig, source: QuerySource | None) -> FusionConfig:
    """The fusion a search runs: the options the call gave, then those a run tuned for the
    version that encoded the query (unless the call chose another method;
    ``options.tuned_fusion``), then the settings."""
    tuned = tuned_fusion(source)
    if tuned and config.method in (None, tuned["fusion"]):
        chosen = {**tuned, "method": tuned["fusion"]}
        config = replace(
            config,
            **{
                item.name: chosen[item.name]
                for item in fields(config)
                if getattr(config, item.name) is None and item.name in chosen
            },
        )
    return config.resolved()


def fusion_plan(
    embedding: Any, text: str, fusion: FusionConfig, match: str, source: QuerySource | None
) -> Fusion:
    """The fused table of ``hybrid_search()`` on ``embedding`` before its query vector and
    keyword terms are known (``fusion`` resolved)."""
    return Fusion(
        vector_column=embedding.attname,
        vector_literal="[]",
        tsvector_column=embedding.tsvector_field_name,
        text=text,
        config=embedding.keyword_config,
        match=match,
        terms=(),
        rrf_k=float(fusion.rrf_k),  # type: ignore[arg-type]
        vector_weight=float(fusion.vector_weight),  # type: ignore[arg-type]
        keyword_weight=float(fusion.keyword_weight),  # type: ignore[arg-type]
        candidates=int(fusion.candidates),  # type: ignore[arg-type]
        fusion=str(fusion.method),
        rescore=rescored_rows(fusion.candidates),
        vector_filter=tuple(same_version(embedding, source).items()),
        source=source,
        max_rows=keyword_max_rows(),
    )


@dataclass(frozen=True, eq=False)  # compared by identity: it stands for one statement's result
class KeywordRows:
    """The keyword side's ``(pk, score)`` list, ranked on database ``using`` before the fused
    statement ran (``SemanticQuerySet.hybrid_search``), for candidates filtered by ``where``
    (``where_key()`` of the queryset then)."""

    using: str
    where: tuple[Any, ...]
    pks: tuple[Any, ...]
    scores: tuple[float, ...]

    def answers(self, using: str, where: tuple[Any, ...]) -> bool:
        """Whether this list is the keyword side of candidates filtered by ``where`` on
        ``using``: the fusion's words and settings are this list's own."""
        return self.using == using and self.where == where

    def as_sql(self, pk_type: str) -> tuple[str, tuple[Any, ...]]:
        """The list as a derived table of (pk, score), in rank order. Each array goes as one
        string in PostgreSQL's array syntax, each pk quoted (any type whose text PostgreSQL
        reads back): the driver sends a string as it is, where it adapts a list item by item
        (0.1 ms more for 100 rows)."""
        pks = (str(pk).replace("\\", "\\\\").replace('"', '\\"') for pk in self.pks)
        pk_array = "{" + ",".join(f'"{pk}"' for pk in pks) + "}"
        score_array = "{" + ",".join(map(repr, self.scores)) + "}"
        return f"SELECT * FROM unnest(%s::{pk_type}[], %s::float8[])", (pk_array, score_array)


class FusedColumn(Expression):
    """A column of the fused derived table, e.g. ``"sbert_hybrid"."score"``."""

    contains_aggregate = False

    def __init__(self, alias: str, column: str, output_field: Any) -> None:
        super().__init__(output_field=output_field)
        self.alias = alias
        self.column = column

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        # Aliases as this Django writes them (alias_quoter), so they match.
        qn = alias_quoter(compiler)
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


class DerivedTableJoin:
    """``INNER JOIN (<a derived table>) alias ON alias.pk = <table>.pk``: the interface of
    Django's ``Join`` for an entry of ``Query.alias_map`` whose SQL (``as_sql``, in each
    subclass) is built when the query is compiled, from ``source``: what the table is made of.
    """

    filtered_relation = None
    nullable = False
    table_name = ""  # each subclass names its derived table

    def __init__(
        self,
        source: Any,
        pk_column: str,
        parent_alias: str,
        table_alias: str | None = None,
        join_type: str = INNER,
    ) -> None:
        self.source = source
        self.pk_column = pk_column
        self.parent_alias = parent_alias
        self.table_alias = table_alias
        self.join_type = join_type

    def relabeled_clone(self, change_map: dict[str, str]) -> DerivedTableJoin:
        return type(self)(
            self.source,
            self.pk_column,
            change_map.get(self.parent_alias, self.parent_alias),
            change_map.get(self.table_alias, self.table_alias),
            self.join_type,
        )

    @property
    def identity(self) -> tuple[Any, ...]:
        return (type(self), self.source, self.parent_alias, self.table_alias)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DerivedTableJoin):
            return NotImplemented
        return self.identity == other.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def promote(self) -> DerivedTableJoin:
        return self  # every row of the result is in the derived table: the join stays INNER

    def demote(self) -> DerivedTableJoin:
        return self

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError("as_sql() must be overridden: each join builds its own table")


class FusedJoin(DerivedTableJoin):
    """``INNER JOIN (<fused top-N of both sides>) alias ON alias.pk = <table>.pk``.

    An entry of ``Query.alias_map`` (the interface of Django's ``Join``). Its SQL is built
    when the query is compiled, from the query's WHERE clause at that moment.
    """

    table_name = TABLE_NAME

    @property
    def fusion(self) -> Fusion:
        return self.source

    # -- SQL --------------------------------------------------------------------------------

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        base = self._candidates(compiler.query)
        vector_sql, vector_params = self._vector_side(base, connection)
        ahead = self.fusion.keyword_rows
        if (
            ahead is not None
            and not getattr(compiler.query, KEYWORDS_INSIDE, False)
            and ahead.answers(connection.alias, where_key(base, connection))
        ):
            pk_type = base.model._meta.pk.rel_db_type(connection)
            keyword_sql, keyword_params = ahead.as_sql(pk_type)
        else:  # filters chained since: rank the keyword side here
            keyword_sql, keyword_params = self._keyword_side(base, connection)
        qn = alias_quoter(compiler)
        f = self.fusion
        if f.fusion == "linear":
            score_sql, score_params = _LINEAR_SCORE, [f.vector_weight, f.keyword_weight]
        else:
            score_sql = _RRF_SCORE
            score_params = [f.vector_weight, f.rrf_k, f.keyword_weight, f.rrf_k]
        sql = (
            "INNER JOIN (SELECT COALESCE(v.pk, t.pk) AS pk, v.rank AS vector_rank, "
            "t.rank AS keyword_rank, t.score AS keyword_score, "
            f"{score_sql} AS score "
            "FROM (SELECT c.pk, c.distance, "
            "ROW_NUMBER() OVER (ORDER BY c.distance, c.pk) AS rank, "
            "MIN(c.distance) OVER () AS nearest, MAX(c.distance) OVER () AS farthest "
            f"FROM ({vector_sql}) AS c (pk, distance)) AS v "
            "FULL OUTER JOIN (SELECT c.pk, c.score, "
            "ROW_NUMBER() OVER (ORDER BY c.score DESC, c.pk) AS rank, MAX(c.score) OVER () AS best "
            f"FROM ({keyword_sql}) AS c (pk, score)) AS t ON v.pk = t.pk"
            f") {qn(self.table_alias)} "
            f"ON ({qn(self.table_alias)}.pk = "
            f"{qn(self.parent_alias)}.{connection.ops.quote_name(self.pk_column)})"
        )
        params = [*(float(value) for value in score_params), *vector_params, *keyword_params]
        return sql, params

    def _candidates(self, outer: Query) -> QuerySet:
        """The queryset's own rows, without the fused join and what refers to it."""
        alias = self.table_alias
        base = candidate_queryset(
            outer, lambda node: isinstance(node, FusedColumn) and node.alias == alias
        )
        base.query.alias_refcount[alias] = 0
        return base

    def keyword_rows_ahead(
        self,
        query: Query,
        connection: Any,
        encode: PendingVector | None = None,
        pipelined: bool = False,
    ) -> KeywordRows:
        """Run the keyword side of ``query`` (the queryset this join is added to) now, on
        ``connection``, for the fused statement to read later (``KeywordRows``), while
        ``encode`` (the search text's vector, if any) is encoded.

        In pipeline mode (``pipelined``) the statement runs on the server from ``execute()``,
        so a text not yet encoding is encoded in this thread before the rows are read: no
        other thread and no GIL shared with this one's Python. Otherwise it is started in
        the encoding pool just before the statement, once the statement is compiled."""
        base = self._candidates(query)
        sql, params = self._keyword_side(base, connection)
        if encode is not None and not pipelined:
            encode.start()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            if encode is not None and pipelined:
                encode.encode_meanwhile()
            rows = cursor.fetchall()
        return KeywordRows(
            connection.alias,
            where_key(base, connection),
            tuple(pk for pk, _ in rows),
            tuple(float(score) for _, score in rows),
        )

    def _vector_side(self, base: QuerySet, connection: Any) -> tuple[str, tuple[Any, ...]]:
        f = self.fusion
        rows = base.filter(**{f"{f.vector_column}__isnull": False}, **dict(f.vector_filter))
        if f.passages is not None:  # pk, distance of the rows with the best passages
            return f.passages.ranked_rows(rows, rows.query, f.candidates, connection)
        if f.binary is not None:
            within, distance = f.binary
            rows = rows.filter(within)
        else:
            field = base.model._meta.get_field(f.vector_column)
            vector = QueryVector(f.vector_literal, f.source, field)
            distance = CosineDistance(f.vector_column, vector)
        candidates = (
            rows.annotate(_sbert_distance=distance)
            .order_by(distance)  # the operator of the HNSW index (vector_cosine_ops)
            .values_list("pk", "_sbert_distance")[: f.candidates]
        )
        return candidates.query.get_compiler(connection=connection).as_sql()

    def _keyword_side(self, base: QuerySet, connection: Any) -> tuple[str, tuple[Any, ...]]:
        f = self.fusion
        matches, rank = tsquery.keyword_filter_and_rank(
            f.tsvector_column, f.text, f.config, f.match, f.terms, f.bm25, f.match_share
        )
        if isinstance(matches, tsquery.Matches) and (f.max_rows is not None or f.bm25 is not None):
            # rank at most max_rows rows; with BM25, the best `rescore` of them by a quick score
            matches = CappedMatch(
                matches,
                f.max_rows,
                prescore=prescore_terms(f.terms, f.match, f.match_share) if f.bm25 else None,
                keep=f.rescore,
                tsvector_column=f.tsvector_column,
                require_condition=f.match == "all",
            )
        candidates = (
            base.filter(matches)
            .annotate(_sbert_rank=rank)
            .order_by(F("_sbert_rank").desc(), "pk")
            .values_list("pk", "_sbert_rank")[: f.candidates]
        )
        return candidates.query.get_compiler(connection=connection).as_sql()


def where_key(queryset: QuerySet, connection: Any) -> tuple[Any, ...]:
    """``queryset``'s WHERE clause compiled, ``(sql, params)``: what tells two candidate lists
    apart (the rest of the keyword side comes from the fusion)."""
    query = queryset.query
    try:
        sql, params = query.get_compiler(connection=connection).compile(query.where)
    except FullResultSet:
        return ("", ())
    except EmptyResultSet:
        return (None, ())
    return (sql, tuple(params))


def candidate_queryset(outer: Query, leave_out: Callable[[Any], bool]) -> QuerySet:
    """The rows ``outer`` filters, without the conditions for which ``leave_out`` is true.

    Top-level conditions left out (those that refer to the fused table, ``.filter(score__gt=
    ...)``, or a keyword search's own capped match) stay with the outer query: a candidate list
    only gets broader, never wrong. Under an OR or a NOT nothing can be taken apart, and the
    candidates are then all the table's rows.
    """
    query = outer.chain()
    query.where = _without(query.where, leave_out)
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
        if not _refers_to(expression, leave_out)
    }
    return QuerySet(model=outer.model, query=query)


def _refers_to(node: Any, leave_out: Callable[[Any], bool]) -> bool:
    if leave_out(node):
        return True
    children = getattr(node, "children", None)
    if children is None:
        children = node.get_source_expressions() if hasattr(node, "get_source_expressions") else []
        lhs, rhs = getattr(node, "lhs", None), getattr(node, "rhs", None)
        children = [*children, lhs, rhs]
    return any(child is not None and _refers_to(child, leave_out) for child in children)


def _without(where: WhereNode, leave_out: Callable[[Any], bool]) -> WhereNode:
    if not _refers_to(where, leave_out):
        return where
    if where.connector != AND or where.negated:
        return WhereNode()
    return WhereNode([child for child in where.children if not _refers_to(child, leave_out)], AND)


_WORDS = "sbert_word"  # CappedMatch's list of (lexeme, idf), which each word's scan reads


class CappedMatch(Expression):
    """``pk IN (SELECT pk FROM <table> WHERE <the queryset's filters> AND <condition> LIMIT n)``.

    What bounds the cost of a keyword search: the rank is computed for at most ``limit`` rows
    that meet ``condition`` (a full-text match), however many rows hold the words. Like the
    fused table, the sub-select is built when the query is compiled, from the queryset's
    filters at that moment (chained before or after the search), so the rows it keeps are
    rows the queryset can return. Which rows it keeps when more match is up to PostgreSQL
    (the first it finds; no order is asked for, so that finding them stays cheap).

    With ``prescore`` (BM25), the rows are found one word at a time instead, each word's
    rows straight from the GIN index (at most ``limit`` per word; no tsvector is read), and
    only the ``keep`` best by the sum of the idf of the words they hold are kept: the exact
    score, which reads a row's whole tsvector, is computed for those alone::

        pk = ANY(ARRAY(SELECT c.pk FROM unnest(:lexemes, :idfs) AS w (lexeme, idf)
             CROSS JOIN LATERAL (SELECT pk FROM <table>
                                 WHERE <filters> AND tsv @@ w.lexeme::tsquery LIMIT n) AS c
             GROUP BY c.pk ORDER BY sum(w.idf) DESC, c.pk LIMIT :keep))

    (One scan planned once and run per word: a UNION ALL of a scan per word cost PostgreSQL
    more to plan than to run.)

    ``condition`` then applies too only with ``require_condition`` (``match="all"``).
    """

    conditional = True
    output_field = BooleanField()

    def __init__(
        self,
        condition: Any,
        limit: int | None,
        pk: Any = None,
        *,
        prescore: tuple[tuple[str, float], ...] | None = None,
        keep: int | None = None,
        tsvector_column: str | None = None,
        require_condition: bool = False,
    ) -> None:
        super().__init__()
        self.condition = condition  # unresolved: resolved again in the sub-select's query
        self.limit = None if limit is None else int(limit)
        self.pk = F("pk") if pk is None else pk
        self.prescore = prescore
        self.keep = keep
        self.tsvector_column = tsvector_column
        self.require_condition = require_condition

    def get_source_expressions(self) -> list[Any]:
        return [self.pk]

    def set_source_expressions(self, exprs: list[Any]) -> None:
        (self.pk,) = exprs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        base = candidate_queryset(compiler.query, _is_capped_match)
        pk_sql, pk_params = compiler.compile(self.pk)
        if not self.prescore or not self.keep:
            rows = base.filter(self.condition).values("pk")[: self.limit]
            sql, params = rows.query.get_compiler(connection=connection).as_sql()
            return f"{pk_sql} = ANY(ARRAY({sql}))", (*pk_params, *params)
        if self.require_condition:
            base = base.filter(self.condition)
        # One word's rows: the scan reads its lexeme from the list it is joined to.
        word = tsquery.TsQuery(RawSQL(f"{_WORDS}.lexeme", (), output_field=TextField()))
        rows = base.filter(tsquery.Matches(F(self.tsvector_column), word))
        rows = rows.values_list("pk")[: self.limit]
        rows_sql, rows_params = rows.query.get_compiler(connection=connection).as_sql()
        lexemes = [bm25.quote_lexeme(lexeme) for lexeme, _ in self.prescore]
        idfs = [float(idf) for _, idf in self.prescore]
        sql = (
            f"SELECT c.pk FROM unnest(%s::text[], %s::float8[]) AS {_WORDS} (lexeme, idf) "
            f"CROSS JOIN LATERAL ({rows_sql}) AS c (pk) "
            f"GROUP BY c.pk ORDER BY sum({_WORDS}.idf) DESC, c.pk LIMIT %s"
        )
        params = (*pk_params, lexemes, idfs, *rows_params, int(self.keep))
        return f"{pk_sql} = ANY(ARRAY({sql}))", params


def prescore_terms(terms: Any, match: str, share: float) -> tuple[tuple[str, float], ...]:
    """``(lexeme, idf)`` of the words whose rows are candidates, from tsquery terms
    ``(lexeme, idf, df)``: with ``match="any"`` the rarest, while together they are in at
    most ``share`` of the rows (tsquery.matching_lexemes); with "all", every word."""
    if match == "any":
        wanted = set(tsquery.matching_lexemes(terms, share))
        terms = [term for term in terms if term[0] in wanted]
    return tuple((lexeme, float(idf)) for lexeme, idf, _ in terms)


def _is_capped_match(node: Any) -> bool:
    return isinstance(node, CappedMatch)


def fused_annotations(alias: str) -> dict[str, FusedColumn]:
    """``score``, ``vector_rank``, ``keyword_rank``, ``keyword_score`` of the fused table."""
    return {
        "score": FusedColumn(alias, "score", FloatField()),
        "vector_rank": FusedColumn(alias, "vector_rank", IntegerField()),
        "keyword_rank": FusedColumn(alias, "keyword_rank", IntegerField()),
        "keyword_score": FusedColumn(alias, "keyword_score", FloatField()),
    }
