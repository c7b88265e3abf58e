"""Rows ranked by their best passage (max-sim), in one SQL statement that uses the passage index.

``similar_to(text)`` on a field with ``passages=`` joins the model's table to a derived table
built when the query is compiled (like hybrid search's, fusion.py), so every filter of the
queryset, chained before or after, applies to the passage scan (docs/passages.md, "How a
search by passages runs", shows the statement).

The pool is the top N passages by the HNSW index, among the passages of rows the filters keep
(their offsets and text come with them, from the heap tuples the index scan reads anyway)::

    SELECT p.row_id, p.vector <=> :q, p.ordinal, p.start, p."end", p.text
    FROM article_embedding_passage p
    WHERE p.row_id IN (SELECT id FROM article WHERE <filters> AND embedding_version = :v ...)
    ORDER BY p.vector <=> :q LIMIT :n                    -- HNSW, iterative scans with filters

How large N must be (``k * PASSAGES_PER_ROW``, then four times that, then ``k *
passage_limit``, which holds ``k`` rows whenever they exist) is docs/passages.md. PostgreSQL
scans a larger pool only when the smaller one named fewer than ``k`` rows (InitPlans run when
first read, and a false gate stops before reading the next)::

    WITH pool0 AS MATERIALIZED (<scan LIMIT n>),
         ok0 AS (SELECT count(DISTINCT row_id) >= k OR count(*) < n AS done FROM pool0),
         pool1 AS MATERIALIZED (<scan LIMIT 4n>), ok1 AS (...)
    SELECT * FROM pool0 WHERE (SELECT done FROM ok0)
    UNION ALL SELECT * FROM pool1 WHERE NOT (SELECT done FROM ok0) AND (SELECT done FROM ok1)
    UNION ALL SELECT * FROM (<scan LIMIT k * max_passages>) w
              WHERE NOT (SELECT done FROM ok0) AND NOT (SELECT done FROM ok1)

Without a limit (``count()``, an unsliced ``iterator()``) every passage of the rows the filters
keep is compared: exact, and as costly as a scan of the passage table.

``hybrid_search()`` takes its vector side's rows from the same pool, ranked by best passage;
each of its rows is then annotated with its own best passage by ``BestPassage`` (a correlated
sub-select over that row's passages, exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Expression, F, FloatField, JSONField, QuerySet
from django.db.models.sql.query import Query
from pgvector.django import CosineDistance

from ..fields import EmbeddingField
from ..passages import passage_limit
from .fusion import DerivedTableJoin, FusedColumn, alias_quoter, candidate_queryset
from .vectors import REBOUND, QuerySource, QueryVector

TABLE_NAME = "sbert_passages"
PASSAGES_PER_ROW = 4  # passages the index scan fetches per row asked for


@dataclass(frozen=True)
class PassageSearch:
    """What a passage scan needs: the field's passage table and the query vector."""

    model: type[models.Model]  # the field's passage model
    vector_literal: str  # the query vector as pgvector text
    source: QuerySource | None  # where it came from, so a retry after a switch can rebind it
    per_row: int  # PASSAGES_PER_ROW: passages fetched per row asked for
    max_per_row: int  # passages one row holds at most: the wide pool's factor

    @classmethod
    def for_field(
        cls, field: EmbeddingField, literal: str, source: QuerySource | None
    ) -> PassageSearch:
        return cls(
            model=field.passage_model,
            vector_literal=literal,
            source=source,
            per_row=passages_per_row(),
            max_per_row=passage_limit(field.passage_config, field.encoder),
        )

    # -- SQL --------------------------------------------------------------------------------

    # The columns every pool and best-per-row table has, in this order.
    COLUMNS = "row_id, distance, ordinal, start, stop, text"

    def _scan(self, base: QuerySet, outer: Query, ordered: bool, connection: Any) -> tuple:
        """The passages of the rows of ``base`` with their distance (``COLUMNS``), nearest
        first when ``ordered`` (a LIMIT is added by the caller), unordered otherwise.

        A passage's offsets and text come with it from the heap tuple the index scan reads
        anyway, so the best passages need no second lookup.
        """
        vector = QueryVector(self.vector_literal, self.source, self.model._meta.get_field("vector"))
        distance = CosineDistance("vector", vector)
        scan = self.model._base_manager.filter(row__in=base.values("pk")).annotate(
            _sbert_distance=distance
        )
        # The operator of the HNSW index (vector_cosine_ops), ascending: the index serves it.
        scan = scan.order_by(distance) if ordered else scan.order_by()
        scan = scan.values_list("row_id", "_sbert_distance", "ordinal", "start", "end", "text")
        rebound = getattr(outer, REBOUND, None)
        if rebound:  # a retry after a switch: the scan's query vector is the new version's
            setattr(scan.query, REBOUND, rebound)
        return scan.query.get_compiler(connection=connection).as_sql()

    def tiers(self, depth: int) -> list[int]:
        """Pool sizes tried in turn for ``depth`` rows: k x PASSAGES_PER_ROW, four times that,
        then k x max_passages (which always holds k rows when they exist)."""
        full = depth * self.max_per_row
        sizes = [depth * self.per_row, depth * self.per_row * 4]
        return [n for n in sizes if n < full] + [full]

    def pool(self, base: QuerySet, outer: Query, depth: int | None, connection: Any) -> tuple:
        """SQL and params of the passage pool for ``depth`` rows (module docstring)."""
        if depth is None:
            return self._scan(base, outer, False, connection)
        depth = max(1, int(depth))
        # One compiled scan, its LIMIT a parameter, for every pool size.
        scan_sql, scan_params = self._scan(base, outer, True, connection)
        *smaller, full = self.tiers(depth)
        if not smaller:
            return f"{scan_sql} LIMIT %s", (*scan_params, full)
        columns = self.COLUMNS
        ctes, params = [], []
        for i, n in enumerate(smaller):
            # Enough: the pool names k rows, or holds fewer passages than asked (all there are).
            ctes.append(
                f"pool{i} ({columns}) AS MATERIALIZED ({scan_sql} LIMIT %s), "
                f"ok{i} (done) AS (SELECT count(DISTINCT row_id) >= %s OR count(*) < %s "
                f"FROM pool{i})"
            )
            params += [*scan_params, n, depth, n]
        branches, branch_params = [], []
        for i in range(len(smaller) + 1):
            # A pool is read only when every smaller one was not enough (InitPlans run lazily,
            # and AND stops at the first false: a larger pool's scan runs only when needed).
            gate = " AND ".join(
                [f"NOT (SELECT done FROM ok{j})" for j in range(i)]
                + ([f"(SELECT done FROM ok{i})"] if i < len(smaller) else [])
            )
            if i < len(smaller):
                branches.append(f"SELECT {columns} FROM pool{i} WHERE {gate}")
            else:
                branches.append(
                    f"SELECT {columns} FROM ({scan_sql} LIMIT %s) AS w ({columns}) WHERE {gate}"
                )
                branch_params += [*scan_params, full]
        sql = f"WITH {', '.join(ctes)} " + " UNION ALL ".join(branches)
        return sql, (*params, *branch_params)

    def best_per_row(
        self, base: QuerySet, outer: Query, depth: int | None, connection: Any
    ) -> tuple:
        """``COLUMNS`` of each row's best passage in the pool."""
        pool_sql, params = self.pool(base, outer, depth, connection)
        sql = (
            f"SELECT DISTINCT ON (c.row_id) {self.COLUMNS} "
            f"FROM ({pool_sql}) AS c ({self.COLUMNS}) "
            "ORDER BY c.row_id, c.distance, c.ordinal"
        )
        return sql, params

    def ranked_rows(self, base: QuerySet, outer: Query, limit: int, connection: Any) -> tuple:
        """``pk, distance`` of the ``limit`` rows with the best passages, best first: hybrid
        search's vector side."""
        sql, params = self.best_per_row(base, outer, limit, connection)
        return (
            f"SELECT b.row_id, b.distance FROM ({sql}) AS b ORDER BY b.distance, b.row_id LIMIT %s",
            (*params, int(limit)),
        )

    def _columns(self, connection: Any) -> dict[str, str]:
        quote = connection.ops.quote_name
        return {f.name: quote(f.column) for f in self.model._meta.concrete_fields}

    def passage_json(self, alias: str, connection: Any) -> str:
        """``jsonb_build_object(...)`` of a passage row aliased ``alias``: the annotation."""
        c = self._columns(connection)
        return (
            f"jsonb_build_object('text', {alias}.{c['text']}, 'start', {alias}.{c['start']}, "
            f"'end', {alias}.{c['end']}, 'index', {alias}.{c['ordinal']})"
        )


class PassageJoin(DerivedTableJoin):
    """``INNER JOIN (<each row's best passage>) alias ON alias.pk = <table>.pk``.

    An entry of ``Query.alias_map`` (the interface of Django's ``Join``, like ``FusedJoin``).
    Its SQL is built when the query is compiled, from the query's WHERE clause and limits at
    that moment: the rows asked for (``k``, a slice, a page) set the pool's size.
    """

    table_name = TABLE_NAME

    @property
    def search(self) -> PassageSearch:
        return self.source

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        outer = compiler.query
        alias = self.table_alias
        base = candidate_queryset(
            outer, lambda node: isinstance(node, FusedColumn) and node.alias == alias
        )
        base.query.alias_refcount[alias] = 0
        # The last row asked for, counted from the first (offset included); None: no limit.
        depth = outer.high_mark
        best_sql, params = self.search.best_per_row(base, outer, depth, connection)
        qn = alias_quoter(compiler)
        sql = (
            f"INNER JOIN (SELECT b.row_id AS pk, b.distance AS distance, "
            "jsonb_build_object('text', b.text, 'start', b.start, 'end', b.stop, "
            f"'index', b.ordinal) AS passage FROM ({best_sql}) AS b) {qn(alias)} "
            f"ON ({qn(alias)}.pk = {qn(self.parent_alias)}."
            f"{connection.ops.quote_name(self.pk_column)})"
        )
        return sql, list(params)


def join_passages(qs: QuerySet, search: PassageSearch) -> tuple[QuerySet, FusedColumn, FusedColumn]:
    """Join ``qs`` to its rows' best passages; returns it with the distance and passage columns."""
    query = qs.query
    parent = query.get_initial_alias()
    alias = query.join(PassageJoin(search, qs.model._meta.pk.column, parent))
    return (
        qs,
        FusedColumn(alias, "distance", FloatField()),
        FusedColumn(alias, "passage", JSONField()),
    )


class BestPassage(Expression):
    """One row's best passage for a query vector (``"passage"``: the JSON annotation) or its
    similarity (``"similarity"``), by a sub-select over that row's passages only.

    The sub-select orders by ``1 - distance`` (descending), never by the index's operator, so
    PostgreSQL reads the row's few passages by their row index instead of walking the HNSW
    index for them. Compiled with the outer query's compiler, so a search run again after a
    switch compares with the new version's query vector.
    """

    def __init__(self, search: PassageSearch, what: str, pk: Any = None) -> None:
        if what not in ("passage", "similarity"):
            raise ValueError(f"what must be 'passage' or 'similarity', not {what!r}.")
        super().__init__(output_field=JSONField() if what == "passage" else FloatField())
        self.search = search
        self.what = what
        self.pk = F("pk") if pk is None else pk

    def get_source_expressions(self) -> list[Any]:
        return [self.pk]

    def set_source_expressions(self, exprs: list[Any]) -> None:
        (self.pk,) = exprs

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        pk_sql, pk_params = compiler.compile(self.pk)
        vector_sql, vector_params = compiler.compile(
            QueryVector(
                self.search.vector_literal,
                self.search.source,
                self.search.model._meta.get_field("vector"),
            )
        )
        c = self.search._columns(connection)
        table = connection.ops.quote_name(self.search.model._meta.db_table)
        similarity = f"1 - (p.{c['vector']} <=> {vector_sql})"
        selected = (
            self.search.passage_json("p", connection) if self.what == "passage" else similarity
        )
        sql = (
            f"(SELECT {selected} FROM {table} p WHERE p.{c['row']} = {pk_sql} "
            f"ORDER BY {similarity} DESC, p.{c['ordinal']} LIMIT 1)"
        )
        selected_params = () if self.what == "passage" else vector_params
        return sql, (*selected_params, *pk_params, *vector_params)


def passages_per_row() -> int:
    """``PASSAGES_PER_ROW``: passages the index scan fetches per row asked for."""
    return PASSAGES_PER_ROW


def uses_passages(field: EmbeddingField, query: Any, passages: bool | None) -> bool:
    """Whether a search ranks by passages: ``passages`` when given, else for a field with
    passages and a query that is a text or a vector (a row's own vector, more like this,
    is compared with the rows' own vectors, as before)."""
    if passages is None:
        return field.has_passages and not isinstance(query, models.Model)
    if passages and not field.has_passages:
        label = f"{field.model._meta.label}.{field.name}"
        raise ValueError(
            f"{label} has no passages: declare it with EmbeddingField(..., passages=True) and run "
            "makemigrations and migrate (it adds the passage table), then index the rows."
        )
    return bool(passages)


def hybrid_annotations(search: PassageSearch, same_version: models.Q) -> dict[str, Any]:
    """``similarity`` and ``passage`` of a hybrid search's rows from their best passage; None
    for a row of another encoder version (a switch in progress) or without passages."""
    return {
        "similarity": models.Case(
            models.When(same_version, then=BestPassage(search, "similarity")),
            default=None,
            output_field=FloatField(),
        ),
        "passage": models.Case(
            models.When(same_version, then=BestPassage(search, "passage")),
            default=None,
            output_field=JSONField(),
        ),
    }
