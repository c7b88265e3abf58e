"""Okapi BM25 (BM25F over the source fields) computed in PostgreSQL from the stored tsvector.

The keyword column ``<name>_tsv`` (column.py) holds every source field's lexemes with their
positions, each position tagged with the field's weight letter (A, B, C, D). That is all a
row's side of BM25 needs:

* ``tf_f(t)``, how often lexeme ``t`` occurs in field ``f``: the number of ``t``'s positions
  tagged ``f``;
* ``len_f``, the length of field ``f``: the number of distinct lexemes tagged ``f``
  (``length(ts_filter(tsv, '{f}'))``, computed in C; counting every position instead would
  mean unnesting the whole tsvector of each candidate, about three times the cost, and in an
  exact computation over SciFact's dev claims it ranked no better).

The collection's side, exact and kept with the rows by triggers (statistics.py): the
number of rows ``N``, each lexeme's document frequency ``df`` (rows holding it in any field),
each field's total length. With ``avglen_f = total_f / N``::

    idf(t)  = ln(1 + (N - df + 0.5) / (df + 0.5))                      (Lucene's, never < 0)
    tf~(t)  = sum over fields f of  w_f * tf_f(t) / (1 - b_f + b_f * len_f / avglen_f)
    score   = sum over query lexemes t of  idf(t) * tf~(t) * (k1 + 1) / (k1 + tf~(t))

(BM25F as in docs/hybrid.md, "Keyword ranking: BM25"; tests/query/test_bm25.py checks it.)

Cost: a candidate row's exact score reads its whole tsvector (tens of microseconds for an
abstract), so rows are scored in two steps: a quick score (the sum of the idf of the query
lexemes a row holds, summed over one GIN index scan per word: query/fusion.CappedMatch)
orders the candidates, and the best ``query.options.BM25_RESCORE``
of them get the exact score. With the defaults the top 10 keeps 98.6% of the exact BM25 top 10
on SciFact's dev claims (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Expression, F, FloatField

LETTERS = ("A", "B", "C", "D")
RANKS = ("bm25",)  # keyword_search(rank=...)
LEXEME_TABLE = "django_sbert_keyword_lexeme"  # (relation, lexeme, df)
TOTAL_TABLE = "django_sbert_keyword_total"  # (relation, weight, total); weight '*': rows


def relation_key(table: str, column: str) -> str:
    """``"<table>.<column>"``: the key of one keyword column's statistics."""
    return f"{table}.{column}"


def length_sql(tsvector: str, letter: str) -> str:
    """SQL of the length of field ``letter`` in ``tsvector``: its distinct lexemes."""
    return f"length(ts_filter({tsvector}, '{{{letter.lower()}}}'))"


def idf(rows: int, df: int) -> float:
    """Lucene's BM25 idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))``: positive for any df."""
    return math.log(1.0 + (rows - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Bm25:
    """The parameters and collection statistics one BM25 ranking needs.

    ``fields``: (weight letter, weight w_f, b_f, average length) per letter the column's
    source fields use, letters of weight 0 or of no text left out. Frozen and made of tuples:
    it is part of a query's (hashable) description."""

    k1: float
    fields: tuple[tuple[str, float, float, float], ...]
    rows: int

    def score_sql(self, tsv_sql: str, terms: Sequence[tuple[str, float]]) -> tuple[str, list]:
        """SQL of the exact BM25F score of the row whose tsvector is ``tsv_sql`` (already
        detoasted once: it is read once per field and once for the lexemes), for ``terms``
        ``(lexeme, idf)``; 0 for a row holding none."""
        if not terms or not self.fields:
            return "0::float8", []
        lexemes = [lexeme for lexeme, _ in terms]
        idfs = [float(value) for _, value in terms]
        # Per row, once: each field's weight over its length norm,
        # w_f / (1 - b_f + b_f * len_f / avglen_f) (OFFSET 0: not inlined into the lexemes').
        # The norm is 0 only for an empty field with b 1, which holds no word (tf 0): a tiny
        # floor keeps its 0 * w / norm at 0 instead of a division by zero.
        norms, norm_params, tf_parts = [], [], []
        for i, (letter, weight, b, average) in enumerate(self.fields):
            length = length_sql("r.tsv", letter)
            norms.append(
                f"%s::float8 / GREATEST(%s::float8 + %s::float8 * {length}, 1e-12) AS n{i}"
            )
            norm_params += [weight, 1.0 - b, b / average]
            tf_parts.append(f"cardinality(array_positions(u.weights, '{letter}')) * d.n{i}")
        k1 = float(self.k1)
        sql = (
            "(SELECT COALESCE(sum(s.idf * s.tf * %s::float8 / (%s::float8 + s.tf)), 0) FROM ("
            "SELECT (%s::float8[])[array_position(%s::text[], u.lexeme)] AS idf, "
            f"{' + '.join(tf_parts)} AS tf "
            f"FROM (SELECT r.tsv, {', '.join(norms)} "
            f"FROM (SELECT {tsv_sql} AS tsv) AS r OFFSET 0) AS d, "
            # Only the query's lexemes: remove every other one (C functions), then unnest.
            "unnest(ts_delete(d.tsv, tsvector_to_array(ts_delete(d.tsv, %s::text[])))) AS u"
            ") AS s)"
        )
        return sql, [k1 + 1.0, k1, idfs, lexemes, *norm_params, lexemes]


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as tsquery input: quoted, so that it is not normalised a second time."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


class TsvectorRank(Expression):
    """A rank of each row computed from its tsvector, for ``terms`` (tuples, the lexeme first):
    the one base of keyword search's rank expressions (``Bm25Rank``; ``tsquery.IdfRank``).

    The tsvector is read once per row (``tsv || ''`` in a sub-select that is not flattened):
    a wide tsvector lives in TOAST, and each function reading it would fetch it again.
    A subclass writes ``score_sql(tsv_sql)``, the rank of the row whose tsvector is ``tsv_sql``.
    """

    output_field = FloatField()

    def __init__(self, column: Any, terms: Sequence[tuple[Any, ...]]) -> None:
        super().__init__()
        self.column = F(column) if isinstance(column, str) else column
        self.terms = tuple(terms)

    def get_source_expressions(self) -> list[Any]:
        return [self.column]

    def set_source_expressions(self, exprs: list[Any]) -> None:
        (self.column,) = exprs

    def score_sql(self, tsv_sql: str) -> tuple[str, list[Any]]:
        """The rank's SQL and parameters; each subclass (``Bm25Rank``, ``tsquery.IdfRank``)
        writes its own."""
        raise NotImplementedError(f"{type(self).__name__} must define score_sql()")

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        column_sql, column_params = compiler.compile(self.column)
        score, params = self.score_sql("sbert_doc.tsv")
        sql = (
            f"(SELECT {score} "
            f"FROM (SELECT {column_sql} || ''::tsvector AS tsv OFFSET 0) AS sbert_doc)"
        )
        return sql, [*params, *column_params]


class Bm25Rank(TsvectorRank):
    """The exact BM25F score of each row, for ``terms`` ``(lexeme, idf)``."""

    def __init__(self, column: Any, bm25: Bm25, terms: Sequence[tuple[str, float]]) -> None:
        super().__init__(column, terms)
        self.bm25 = bm25

    def score_sql(self, tsv_sql: str) -> tuple[str, list[Any]]:
        return self.bm25.score_sql(tsv_sql, self.terms)


# One round trip: the collection totals, then each query lexeme with its document frequency.
STATISTICS_SQL = f"""
SELECT NULL::text, t.weight::text, t.total FROM {TOTAL_TABLE} AS t WHERE t.relation = %s
UNION ALL
SELECT q.lexeme, NULL::text, COALESCE(s.df, 0)
FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))) AS q
LEFT JOIN {LEXEME_TABLE} AS s ON s.relation = %s AND s.lexeme = q.lexeme
"""


def read_statistics(
    connection: Any, relation: str, configs: Sequence[str], text: str
) -> tuple[int | None, dict[str, int], dict[str, int]]:
    """``(rows, {letter: total length}, {lexeme: df})`` for ``text``'s lexemes (under each of
    ``configs``), one query per configuration; rows None where the column has no statistics
    (its triggers were never installed: statistics.py)."""
    totals: dict[str, int] = {}
    dfs: dict[str, int] = {}
    with connection.cursor() as cursor:
        for i, config in enumerate(dict.fromkeys(configs)):
            cursor.execute(STATISTICS_SQL, [relation, config, text, relation])
            for lexeme, weight, value in cursor.fetchall():
                if lexeme is None:
                    if i == 0:
                        totals[weight] = int(value)
                else:
                    dfs[lexeme] = int(value)
    rows = totals.pop("*", None)
    return rows, totals, dfs


def parameters(
    letters: Sequence[str],
    totals: Mapping[str, int],
    rows: int | None,
    k1: float,
    b: float | Mapping[str, float],
    weights: Mapping[str, float],
) -> Bm25:
    """A ``Bm25`` for a column whose source fields use ``letters``: ``b`` one value or one per
    letter, ``weights`` per letter (missing: 1), average lengths from ``totals`` / ``rows``."""
    fields = []
    rows = rows or 0
    for letter in dict.fromkeys(letters):
        weight = float(weights.get(letter, 1.0))
        total = totals.get(letter, 0)
        if weight <= 0 or total <= 0 or rows <= 0:
            continue  # no text in that field yet, or a field left out: it adds nothing
        field_b = float(b.get(letter, 0.75)) if isinstance(b, Mapping) else float(b)
        fields.append((letter, weight, field_b, total / rows))
    return Bm25(k1=float(k1), fields=tuple(fields), rows=int(rows))
