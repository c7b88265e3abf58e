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

A filter that holds a subquery (``pk__in=queryset``, a Wagtail queryset's pages) costs a query
to test one row: as a semi-join, PostgreSQL either runs it for every passage the index scan
meets, or ranks every kept row's passages exactly (2 to 3 times the time on 5,550 Wagtail
pages, docs/benchmarks.md). Such a search lists the kept rows once, then goes by their number::

    WITH sbert_kept (pk) AS MATERIALIZED (SELECT id FROM article WHERE <filters> LIMIT 50001),
         sbert_sized (n) AS (SELECT count(*) FROM sbert_kept),
         kpool0 AS MATERIALIZED (<scan WHERE (row_id IN (SELECT pk FROM sbert_kept)) IS TRUE
                                 LIMIT n>),
         kok0 AS (SELECT count(DISTINCT row_id) >= k AS done, count(*) >= n AS filled ...), ...
    SELECT * FROM kpool0 WHERE <1,000 < n <= 50,000> AND (SELECT done FROM kok0)
    UNION ALL ... kpool1, when kpool0 was filled but named fewer than k rows
    UNION ALL SELECT * FROM (<scan WHERE row_id IN (SELECT pk FROM sbert_kept) LIMIT k *
              max_passages>) w WHERE <n <= 1,000> OR <a pool named fewer than k rows>
    UNION ALL SELECT * FROM (<the tiers above>) p WHERE <n > 50,000>

``IS TRUE`` keeps the ``IN`` from becoming a join: the kept keys are hashed once and each
passage the index scan meets is tested against them. A pool that comes back short of n
passages ran out (of passages, or of ``hnsw.max_scan_tuples`` when the rows are a small share
of the table): a larger one would run out the same way, so the exact ranking is taken at once.

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
from django.db.models import (
    BooleanField,
    Expression,
    F,
    FloatField,
    Func,
    JSONField,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.expressions import RawSQL
from django.db.models.sql.query import Query
from pgvector.django import CosineDistance

from ..fields import EmbeddingField
from ..passages import passage_limit
from .fusion import DerivedTableJoin, FusedColumn, alias_quoter, candidate_queryset
from .vectors import REBOUND, QuerySource, QueryVector

TABLE_NAME = "sbert_passages"
PASSAGES_PER_ROW = 4  # passages the index scan fetches per row asked for
# Filters that hold a subquery (a Wagtail queryset's pages): up to this many kept rows have
# their passages ranked exactly; up to KEPT_ROWS_HASHED they are a hashed set the HNSW scan
# tests (a few hundred kB of memory); beyond, PostgreSQL plans the semi-join itself.
EXACT_ROWS = 1000
KEPT_ROWS_HASHED = 50000


class IsTrue(Func):
    """``(condition) IS TRUE``: the same rows as ``condition``, but PostgreSQL never turns an
    ``IN (subquery)`` inside it into a join; it runs the subquery once, as a hashed set."""

    template = "(%(expressions)s) IS TRUE"
    output_field = BooleanField()
    conditional = True


def holds_subquery(node: Any) -> bool:
    """Whether a WHERE clause (or any part of it) holds a subquery: a filter whose test of
    one row costs a query, not an index probe."""
    if isinstance(node, (Query, Subquery)):
        return True
    parts = list(getattr(node, "children", ()))
    parts += [getattr(node, side) for side in ("lhs", "rhs") if hasattr(node, side)]
    if hasattr(node, "get_source_expressions"):
        parts += node.get_source_expressions()
    return any(holds_subquery(part) for part in parts if part is not None and part is not node)


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

    def _scan(
        self, kept: Any, outer: Query, ordered: bool, connection: Any, hashed: bool = False
    ) -> tuple:
        """The passages of the rows in ``kept`` (a queryset of primary keys, or the
        ``sbert_kept`` table of ``pool``) with their distance (``COLUMNS``), nearest first when
        ``ordered`` (a LIMIT is added by the caller), unordered otherwise.

        ``hashed``: ``kept`` is tested as a hashed set by the index scan (``IS TRUE``) rather
        than joined as PostgreSQL's estimates choose (module docstring). A passage's offsets
        and text come with it from the heap tuple the index scan reads anyway, so the best
        passages need no second lookup.
        """
        vector = QueryVector(self.vector_literal, self.source, self.model._meta.get_field("vector"))
        distance = CosineDistance("vector", vector)
        within = Q(row__in=kept)
        scan = self.model._base_manager.filter(IsTrue(within) if hashed else within)
        scan = scan.annotate(_sbert_distance=distance)
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
        rows = base.order_by().values("pk")
        if depth is None:
            return self._scan(rows, outer, False, connection)
        depth = max(1, int(depth))
        planned = self._tiered(rows, outer, depth, connection)
        if len(self.tiers(depth)) == 1 or not holds_subquery(base.query.where):
            return planned
        return self._kept_first(rows, outer, depth, connection, planned)

    def _tiered(self, rows: QuerySet, outer: Query, depth: int, connection: Any) -> tuple:
        """The pools as a semi-join of ``rows``, each read only when the smaller one named
        fewer than ``depth`` rows (module docstring)."""
        # One compiled scan, its LIMIT a parameter, for every pool size.
        scan_sql, scan_params = self._scan(rows, outer, True, connection)
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

    def _kept_first(
        self, rows: QuerySet, outer: Query, depth: int, connection: Any, planned: tuple
    ) -> tuple:
        """The pools for filters that hold a subquery: the rows they keep are listed once
        (``sbert_kept``, at most ``KEPT_ROWS_HASHED`` + 1), then by how many there are: a few
        (``EXACT_ROWS``) have their passages ranked exactly; more are a hashed set the HNSW
        scan tests (module docstring); more still take ``planned`` (``_tiered``)."""
        kept_sql, kept_params = (
            rows[: KEPT_ROWS_HASHED + 1].query.get_compiler(connection=connection).as_sql()
        )
        kept = RawSQL("SELECT pk FROM sbert_kept", ())
        scan_sql, scan_params = self._scan(kept, outer, True, connection, hashed=True)
        exact_sql, exact_params = self._scan(kept, outer, True, connection)
        *smaller, full = self.tiers(depth)
        columns = self.COLUMNS
        ctes = [
            f"sbert_kept (pk) AS MATERIALIZED ({kept_sql})",
            "sbert_sized (n) AS (SELECT count(*) FROM sbert_kept)",
        ]
        params: list[Any] = [*kept_params]
        for i, n in enumerate(smaller):
            ctes.append(
                f"kpool{i} ({columns}) AS MATERIALIZED ({scan_sql} LIMIT %s), "
                f"kok{i} (done, filled) AS (SELECT count(DISTINCT row_id) >= %s, "
                f"count(*) >= %s FROM kpool{i})"
            )
            params += [*scan_params, n, depth, n]
        size = "(SELECT n FROM sbert_sized)"
        few, many = f"{size} <= {EXACT_ROWS}", f"{size} > {KEPT_ROWS_HASHED}"
        hashed = f"NOT {few} AND NOT {many}"
        done = [f"(SELECT done FROM kok{i})" for i in range(len(smaller))]
        filled = [f"(SELECT filled FROM kok{i})" for i in range(len(smaller))]
        branches = []
        for i in range(len(smaller)):
            # Pool i is read when every smaller one was full yet named too few rows (InitPlans
            # run lazily, and AND stops at the first false: a larger scan runs only when needed).
            steps = [f"NOT {done[j]} AND {filled[j]}" for j in range(i)]
            branches.append(
                f"SELECT {columns} FROM kpool{i} WHERE " + " AND ".join([hashed, *steps, done[i]])
            )
        # Exact: for a few rows, or when the last pool named too few rows, or a pool ran out
        # (of passages, or of hnsw.max_scan_tuples: a larger one would too).
        short = f"NOT {done[-1]}"
        for j in reversed(range(len(smaller) - 1)):
            short = f"NOT {done[j]} AND (NOT {filled[j]} OR {short})"
        branches.append(
            f"SELECT {columns} FROM ({exact_sql} LIMIT %s) AS w ({columns}) "
            f"WHERE {few} OR ({hashed} AND {short})"
        )
        planned_sql, planned_params = planned
        branches.append(f"SELECT {columns} FROM ({planned_sql}) AS p ({columns}) WHERE {many}")
        sql = f"WITH {', '.join(ctes)} " + " UNION ALL ".join(branches)
        return sql, (*params, *exact_params, full, *planned_params)

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
