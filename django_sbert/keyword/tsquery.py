"""The query-time half of keyword search: the tsquery, matching rows, and their rank.

The stored ``tsvector`` column is column.py's; its BM25 rank is bm25.py's (see docs/hybrid.md).

* ``match="all"``: ``websearch_to_tsquery(config, text)``, the syntax of a web search box
  (``"exact phrase"``, ``-excluded``, ``or``); every other word must occur.
* ``match="any"``: rows containing one of the rarest words of the text (together in at most a
  share of the rows: ``matching_lexemes``), ranked by all of them.

Rows are ranked by BM25 (bm25.py) from the exact statistics the triggers keep
(statistics.py). Where a column has no statistics (a role that may not create triggers) the
rank is PostgreSQL's (docs/hybrid.md): ``ts_rank_cd`` for "all", and for "any" ``ts_rank``
weighted by each word's idf from ANALYZE's ``pg_stats.most_common_elems``, as ``ts_rank``
alone would let many common words outrank the rare word that matters. Words in more than
``max_df`` of the rows are dropped (unless every word is); a word the statistics do not list is
always searched for, but is never the only word a row may hold.

Neither raises on user input at evaluation: an empty or punctuation-only text simply matches
no row, and a text PostgreSQL cannot take (a NUL character) is refused by ``check_text()``
when the search is built, with a ``ValueError`` that says so.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchQueryField, SearchRank
from django.db.models import BooleanField, Expression, F, FloatField, Func, Value

from . import bm25
from .column import DEFAULT_CONFIG

MATCH_MODES = ("all", "any")
# ts_rank_cd's default multipliers for weights D, C, B, A: a title (A) match counts 10x a D one.
RANK_WEIGHTS = (0.1, 0.2, 0.4, 1.0)


def query_configs(config: str | Mapping[str, str]) -> list[str]:
    """The configurations a query's text is analysed with: each field's, once, in order."""
    if isinstance(config, Mapping):
        return list(dict.fromkeys(str(value) for value in config.values())) or [DEFAULT_CONFIG]
    return [str(config)]


def websearch_query(text: str, config: str | Mapping[str, str]) -> Expression:
    """``websearch_to_tsquery(config, text)``: the syntax of a web search box, never an error.

    Fields analysed with different configurations: the text as each reads it, or-ed."""
    queries = [SearchQuery(text, config=c, search_type="websearch") for c in query_configs(config)]
    combined = queries[0]
    for query in queries[1:]:
        combined = combined | query
    return combined


class Matches(Func):
    """``tsvector @@ tsquery`` as a boolean expression usable in ``filter()``."""

    template = "%(expressions)s"
    arg_joiner = " @@ "
    output_field = BooleanField()


# The fraction of rows holding each of the column's most common lexemes, as ANALYZE (and
# autovacuum) gathers it; the last three numbers of the array are summary values.
STATS_SQL = """
SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs
FROM pg_stats AS s
WHERE s.tablename = %s AND s.attname = %s AND s.schemaname = ANY (current_schemas(false))
"""
LEXEMES_SQL = "SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))"
MAX_TERMS = 16  # the rarest words of a long query text are kept
# A candidate row must hold one of the query's rarest words, taken while together they are in
# at most this share of the rows: the GIN index finds few rows to rank, and rows holding only
# commoner words seldom ranked high anyway.
MATCH_DF = 0.1
STATS_SECONDS = 60.0  # how long a process reuses a column's statistics (they change at ANALYZE)

_stats_cache: dict[tuple[str, str, str], tuple[float, dict[str, float], float | None]] = {}
_stats_lock = threading.Lock()


def column_statistics(
    connection: Any, table: str, column: str
) -> tuple[dict[str, float], float | None]:
    """``({lexeme: fraction of rows}, smallest fraction listed)`` of a tsvector column.

    Read from ``pg_stats`` at most every ``STATS_SECONDS`` per process; ``({}, None)`` before
    the first ANALYZE.
    """
    key = (connection.alias, table, column)
    now = time.monotonic()
    with _stats_lock:
        cached = _stats_cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1], cached[2]
    with connection.cursor() as cursor:
        cursor.execute(STATS_SQL, [table, column])
        rows = cursor.fetchall()
    freqs: dict[str, float] = {}
    for elems, values in rows:
        for elem, freq in zip(elems or [], values or [], strict=False):
            freqs[elem] = max(float(freq), freqs.get(elem, 0.0))
    floor = min(freqs.values()) if freqs else None
    with _stats_lock:
        _stats_cache[key] = (now + STATS_SECONDS, freqs, floor)
    return freqs, floor


def clear_statistics_cache() -> None:
    """Forget the column statistics this process has read (tests, after ANALYZE)."""
    with _stats_lock:
        _stats_cache.clear()


# (lexeme, idf, fraction of rows holding it): the fraction is 0.0 for a word the statistics do
# not list (its idf then assumes half the rarest listed fraction) and None without statistics.
Term = tuple[str, float, float | None]


def query_terms(
    connection: Any, table: str, column: str, config: str, text: str, max_df: float
) -> tuple[Term, ...]:
    """``(lexeme, idf, df)`` of the words of ``text`` worth searching for, rarest first.

    ``idf = ln(1 + (1 - df) / df)`` with ``df`` the fraction of rows holding the word; a word
    outside the most common ones counts as half as frequent as the least common of them (and
    is returned with df 0.0: how many rows hold it, if any, is unknown). Without statistics
    yet (a new table) every word weighs 1 and none is dropped.
    """
    with connection.cursor() as cursor:
        cursor.execute(LEXEMES_SQL, [config, text])
        lexemes = sorted(row[0] for row in cursor.fetchall())
    if not lexemes:
        return ()
    freqs, floor = column_statistics(connection, table, column)
    if floor is None:
        return tuple((lexeme, 1.0, None) for lexeme in lexemes[:MAX_TERMS])
    weighted = []
    for lexeme in lexemes:
        listed = lexeme in freqs
        df = min(max(freqs[lexeme] if listed else floor / 2, 1e-6), 1.0)
        weighted.append((df, lexeme, math.log(1.0 + (1.0 - df) / df), listed))
    weighted.sort()
    kept = [item for item in weighted if item[0] <= max_df] or weighted[:1]
    return tuple(
        (lexeme, idf, df if listed else 0.0) for df, lexeme, idf, listed in kept[:MAX_TERMS]
    )


def tsquery_literal(lexemes: Sequence[str]) -> str:
    """``'a' | 'b'``: lexemes quoted for tsquery input (no second normalization)."""
    return " | ".join(bm25.quote_lexeme(lexeme) for lexeme in lexemes)


class TsQuery(Func):
    """A tsquery written out (``'a' | 'b'``), cast as it is: the lexemes are normalized already."""

    template = "%(expressions)s::tsquery"
    output_field = SearchQueryField()


class IdfRank(bm25.TsvectorRank):
    """``sum(idf * ts_rank(weights, tsv, 'word'))`` over the query's ``terms``
    ``(lexeme, idf, df)``, per row: the rank of a column without BM25 statistics."""

    def score_sql(self, tsv_sql: str) -> tuple[str, list[Any]]:
        if not self.terms:
            return "0::float8", []
        weights = "{" + ",".join(str(w) for w in RANK_WEIGHTS) + "}"
        parts, params = [], []
        for lexeme, idf, _ in self.terms:
            parts.append(f"%s * ts_rank(%s::float4[], {tsv_sql}, %s::tsquery)")
            params += [float(idf), weights, tsquery_literal([lexeme])]
        return " + ".join(parts), params


def check_text(text: str) -> str:
    """``text`` if PostgreSQL can take it as a query; else a ``ValueError`` naming the problem.

    A NUL character cannot be sent in a PostgreSQL string: without this check the search would
    fail only when evaluated, with a driver error.
    """
    if "\x00" in text:
        raise ValueError(
            "The search text contains a NUL character (\\x00), which PostgreSQL cannot take; "
            "remove it (e.g. text.replace('\\x00', ''))."
        )
    return text


def bm25_terms(
    connection: Any,
    relation: str,
    configs: Sequence[str],
    text: str,
    max_df: float,
    letters: Sequence[str],
    k1: float,
    b: float | Mapping[str, float],
    weights: Mapping[str, float],
) -> tuple[tuple[Term, ...], bm25.Bm25 | None]:
    """``(lexeme, idf, df)`` of the words of ``text`` worth searching for, rarest first, and
    the BM25 parameters of the column, from its exact statistics (statistics.py).

    A word no row holds is left out (it can match nothing); words in more than ``max_df`` of
    the rows too, unless every word is. ``((), None)`` where the column has no statistics."""
    rows, totals, dfs = bm25.read_statistics(connection, relation, configs, text)
    if rows is None:
        return (), None
    parameters = bm25.parameters(letters, totals, rows, k1, b, weights)
    if rows <= 0:
        return (), parameters
    weighted = sorted(
        (df / rows, lexeme, bm25.idf(rows, df)) for lexeme, df in dfs.items() if df > 0
    )
    kept = [item for item in weighted if item[0] <= max_df] or weighted[:1]
    terms = tuple((lexeme, value, share) for share, lexeme, value in kept[:MAX_TERMS])
    return terms, parameters


def keyword_filter_and_rank(
    column: str,
    text: str,
    config: str | Mapping[str, str],
    match: str,
    terms: Sequence[Term] | None = None,
    parameters: bm25.Bm25 | None = None,
    match_share: float = MATCH_DF,
) -> tuple[Expression, Expression]:
    """(``column @@ query``, its rank) for a tsvector column name.

    ``match="any"`` needs the ``terms`` from query_terms() (or bm25_terms()): rows must hold
    one of ``matching_lexemes(terms, match_share)`` and are ranked by all the terms.
    ``match="all"`` reads ``text``. With the BM25 ``parameters`` (and its terms) the rank is
    BM25F (bm25.py); without (a column with no statistics) PostgreSQL's: idf-weighted
    ``ts_rank`` for "any", cover density for "all".
    """
    if parameters is not None:
        if match not in MATCH_MODES:
            raise ValueError(f"match must be one of {MATCH_MODES}, got {match!r}.")
        if not terms:
            false = Value(False, output_field=BooleanField())
            return false, Value(0.0, output_field=FloatField())
        rank = bm25.Bm25Rank(F(column), parameters, [(lexeme, idf) for lexeme, idf, _ in terms])
        if match == "all":
            return Matches(F(column), websearch_query(text, config)), rank
        query = TsQuery(Value(tsquery_literal(matching_lexemes(terms, match_share))))
        return Matches(F(column), query), rank
    if match == "all":
        query = websearch_query(text, config)
        rank = SearchRank(F(column), query, weights=list(RANK_WEIGHTS), cover_density=True)
        return Matches(F(column), query), rank
    if match != "any":
        raise ValueError(f"match must be one of {MATCH_MODES}, got {match!r}.")
    if not terms:
        return Value(False, output_field=BooleanField()), Value(0.0, output_field=FloatField())
    query = TsQuery(Value(tsquery_literal(matching_lexemes(terms))))
    return Matches(F(column), query), IdfRank(F(column), terms)


def matching_lexemes(terms: Sequence[Term], share: float = MATCH_DF) -> list[str]:
    """The words a candidate row must hold one of: every word the statistics do not list, and
    the rarest listed ones while together they are in at most ``share`` (``MATCH_DF``) of the
    rows (at least one listed word); every word without statistics.

    An unlisted word is in few rows or in none (a word no row holds looks exactly like a rare
    one), so it costs the GIN index little, but it must not stand in for the listed words:
    on its own it could leave no candidate at all.
    """
    if any(df is None for _, _, df in terms):
        return [lexeme for lexeme, _, _ in terms]
    unlisted = [lexeme for lexeme, _, df in terms if df == 0.0]
    listed = sorted((df, lexeme) for lexeme, _, df in terms if df)
    chosen: list[str] = []
    total = 0.0
    for df, lexeme in listed:
        if chosen and total + df > share:
            break
        chosen.append(lexeme)
        total += df
    return unlisted + chosen
