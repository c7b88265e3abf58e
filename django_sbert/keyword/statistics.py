"""The collection statistics of BM25 (bm25.py), kept exact by PostgreSQL triggers.

For each keyword column (``EmbeddingField(keyword_search=True)``'s ``<name>_tsv``) two small
tables of ours (migration 0009) hold, under the key ``"<table>.<column>"``:

* ``django_sbert_keyword_total``: the number of rows (weight ``'*'``) and, per weight letter,
  the total length of that field (distinct lexemes, as bm25.py measures a field);
* ``django_sbert_keyword_lexeme``: per lexeme, how many rows hold it (any field).

Triggers on the table keep them right whatever writes the rows (``save()``, ``bulk_create``,
``update()``, raw SQL, COPY, ``TRUNCATE``): per statement for INSERT and DELETE (transition
tables: one upsert per table, not one per row), per row for ``UPDATE OF <column>`` only when
the text changed (PostgreSQL allows no transition table with a column list).

Every run first upserts the ``'*'`` row of its column, then lexemes in lexeme order: two
transactions writing the same table queue on that one row rather than deadlock over lexemes
taken in different orders; the price of exact counts (docs/hybrid.md).

``install()`` (run after ``migrate`` by apps.py, idempotent) creates the functions and
triggers, and counts the rows already there when the column has no statistics yet, under a
lock that holds writers back meanwhile; ``rebuild()`` (``manage.py sbert_keyword_stats
--rebuild``) counts again from scratch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction

from .bm25 import LEXEME_TABLE, TOTAL_TABLE, length_sql, relation_key
from .column import field_weights

TRIGGER_PREFIX = "sbert_kw_"


def _names(table: str, column: str) -> dict[str, str]:
    """Function and trigger names of one column (hashed: names are at most 63 bytes)."""
    digest = hashlib.sha1(relation_key(table, column).encode()).hexdigest()[:12]
    base = f"{TRIGGER_PREFIX}{digest}"
    return {
        "rows": f"{base}_rows",
        "update": f"{base}_update",
        "truncate": f"{base}_truncate",
        "insert_trigger": f"{base}_insert",
        "delete_trigger": f"{base}_delete",
        "update_trigger": f"{base}_update",
        "truncate_trigger": f"{base}_truncate",
    }


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def function_sql(table: str, column: str, letters: Sequence[str], quote: Any) -> list[str]:
    """``CREATE OR REPLACE FUNCTION`` statements of one keyword column's triggers."""
    names = _names(table, column)
    relation = _literal(relation_key(table, column))
    col = quote(column)
    letters = list(dict.fromkeys(letters))
    statement_totals = " UNION ALL ".join(
        ["SELECT '*'::text AS weight, count(*)::bigint AS total FROM sbert_rows"]
        + [
            f"SELECT '{letter}', COALESCE(sum({length_sql('r.' + col, letter)}), 0)::bigint "
            "FROM sbert_rows AS r"
            for letter in letters
        ]
    )
    row_totals = ", ".join(
        ["('*', 0::bigint)"]
        + [
            f"('{letter}', ({length_sql('NEW.' + col, letter)} - "
            f"{length_sql('OLD.' + col, letter)})::bigint)"
            for letter in letters
        ]
    )
    upsert_total = (
        f"INSERT INTO {TOTAL_TABLE} AS s (relation, weight, total) "
        f"SELECT {relation}, w.weight, %s FROM (%s) AS w ORDER BY w.weight "
        "ON CONFLICT (relation, weight) DO UPDATE SET total = s.total + EXCLUDED.total;"
    )
    upsert_lexeme = (
        f"INSERT INTO {LEXEME_TABLE} AS s (relation, lexeme, df) %s "
        "ON CONFLICT (relation, lexeme) DO UPDATE SET df = s.df + EXCLUDED.df;"
    )
    rows_body = upsert_total % ("sign * w.total", statement_totals) + upsert_lexeme % (
        f"SELECT {relation}, l.lexeme, sign * count(*) FROM sbert_rows AS r, "
        f"unnest(tsvector_to_array(r.{col})) AS l (lexeme) GROUP BY l.lexeme "
        "ORDER BY l.lexeme"
    )
    update_body = upsert_total % (
        "w.total",
        f"SELECT * FROM (VALUES {row_totals}) AS v (weight, total)",
    ) + upsert_lexeme % (
        f"SELECT {relation}, l.lexeme, sum(l.delta) FROM ("
        f"SELECT x, 1 FROM unnest(tsvector_to_array(NEW.{col})) AS x UNION ALL "
        f"SELECT x, -1 FROM unnest(tsvector_to_array(OLD.{col})) AS x"
        ") AS l (lexeme, delta) GROUP BY l.lexeme HAVING sum(l.delta) <> 0 ORDER BY l.lexeme"
    )
    truncate_body = (
        f"UPDATE {TOTAL_TABLE} SET total = 0 WHERE relation = {relation};"
        f"DELETE FROM {LEXEME_TABLE} WHERE relation = {relation};"
    )

    def function(name: str, declare: str, body: str) -> str:
        # SECURITY DEFINER: the counts are written with the rights of the role that ran
        # migrate, so a role that may write the site's tables needs no grant on ours; the
        # search_path is fixed to migrate's, so no caller's objects can stand in for ours.
        return (
            f"CREATE OR REPLACE FUNCTION {quote(name)}() RETURNS trigger LANGUAGE plpgsql "
            "SECURITY DEFINER SET search_path FROM CURRENT AS "
            f"$sbert$ {declare} BEGIN {body} RETURN NULL; END $sbert$"
        )

    return [
        function(
            names["rows"],
            "DECLARE sign bigint := CASE TG_OP WHEN 'DELETE' THEN -1 ELSE 1 END;",
            rows_body,
        ),
        function(names["update"], "", update_body),
        function(names["truncate"], "", truncate_body),
    ]


def trigger_sql(table: str, column: str, quote: Any) -> dict[str, str]:
    """``{trigger name: CREATE TRIGGER statement}`` of one keyword column."""
    names = _names(table, column)
    t, col = quote(table), quote(column)
    return {
        names["insert_trigger"]: (
            f"CREATE TRIGGER {quote(names['insert_trigger'])} AFTER INSERT ON {t} "
            "REFERENCING NEW TABLE AS sbert_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {quote(names['rows'])}()"
        ),
        names["delete_trigger"]: (
            f"CREATE TRIGGER {quote(names['delete_trigger'])} AFTER DELETE ON {t} "
            "REFERENCING OLD TABLE AS sbert_rows FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {quote(names['rows'])}()"
        ),
        names["update_trigger"]: (
            f"CREATE TRIGGER {quote(names['update_trigger'])} AFTER UPDATE OF {col} ON {t} "
            f"FOR EACH ROW WHEN (OLD.{col} IS DISTINCT FROM NEW.{col}) "
            f"EXECUTE FUNCTION {quote(names['update'])}()"
        ),
        names["truncate_trigger"]: (
            f"CREATE TRIGGER {quote(names['truncate_trigger'])} AFTER TRUNCATE ON {t} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {quote(names['truncate'])}()"
        ),
    }


def _count_sql(table: str, column: str, letters: Sequence[str], quote: Any) -> tuple[str, str]:
    """SELECTs of ``(relation, weight, total)`` and ``(relation, lexeme, df)``, counted from
    the rows."""
    relation = _literal(relation_key(table, column))
    t, col = quote(table), quote(column)
    totals = " UNION ALL ".join(
        [f"SELECT {relation}, '*', count(*) FROM {t}"]
        + [
            f"SELECT {relation}, '{letter}', COALESCE(sum({length_sql(col, letter)}), 0) FROM {t}"
            for letter in dict.fromkeys(letters)
        ]
    )
    stat_query = _literal(f"SELECT {col} FROM {t}")
    return totals, f"SELECT {relation}, word, ndoc FROM ts_stat({stat_query}) ORDER BY word"


def _recount_sql(table: str, column: str, letters: Sequence[str], quote: Any) -> list[str]:
    relation = _literal(relation_key(table, column))
    totals, lexemes = _count_sql(table, column, letters, quote)
    return [
        f"DELETE FROM {TOTAL_TABLE} WHERE relation = {relation}",
        f"DELETE FROM {LEXEME_TABLE} WHERE relation = {relation}",
        f"INSERT INTO {TOTAL_TABLE} (relation, weight, total) {totals}",
        f"INSERT INTO {LEXEME_TABLE} (relation, lexeme, df) {lexemes}",
    ]


def keyword_columns(models: Sequence[Any] | None = None) -> list[tuple[str, str, list[str]]]:
    """``(table, column, weight letters)`` of every keyword column of the project's models
    (or of ``models``)."""
    # Imported here: fields imports models, which Django loads after this module may be.
    from ..fields import EmbeddingField, all_embedding_fields

    if models is None:
        pairs = all_embedding_fields()
    else:
        pairs = [
            (model, field)
            for model in models
            for field in model._meta.local_concrete_fields
            if isinstance(field, EmbeddingField)
        ]
    found = []
    for model, field in pairs:
        if not field.keyword_search or model._meta.proxy or not model._meta.managed:
            continue
        if not field.has_keyword_search:
            continue
        sources = field._keyword_source_fields(model)
        if not sources:
            continue
        column = model._meta.get_field(field.tsvector_field_name).column
        letters = field_weights(sources, field.keyword_weights)
        found.append((model._meta.db_table, column, letters))
    return found


def _has_column(cursor: Any, table: str, column: str) -> bool:
    cursor.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
        "AND NOT attisdropped",
        [table, column],
    )
    return cursor.fetchone() is not None


def install(
    using: str = "default", *, rebuild_all: bool = False, models: Sequence[Any] | None = None
) -> list[str]:
    """Create (or replace) the triggers of every keyword column on database ``using`` (of
    ``models`` only, if given), and count the rows of each column that has no statistics yet
    (every column with ``rebuild_all``). Drops the triggers of keyword columns that are gone
    (not with ``models``). Returns the keys ``"<table>.<column>"`` counted."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    quote = connection.ops.quote_name
    counted = []
    wanted = set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [TOTAL_TABLE])
        if cursor.fetchone()[0] is None:
            return []  # django_sbert's migration 0009 has not run on this database
        for table, column, letters in keyword_columns(models):
            if not _has_column(cursor, quote(table), column):
                continue
            triggers = trigger_sql(table, column, quote)
            wanted.update((table, name) for name in triggers)
            with transaction.atomic(using=using):
                # Writers wait while the triggers are replaced and the rows counted, so no row
                # is counted twice or missed; readers go on.
                cursor.execute(f"LOCK TABLE {quote(table)} IN SHARE ROW EXCLUSIVE MODE")
                for statement in function_sql(table, column, letters, quote):
                    cursor.execute(statement)
                for name, statement in triggers.items():
                    cursor.execute(f"DROP TRIGGER IF EXISTS {quote(name)} ON {quote(table)}")
                    cursor.execute(statement)
                cursor.execute(
                    f"SELECT 1 FROM {TOTAL_TABLE} WHERE relation = %s AND weight = '*'",
                    [relation_key(table, column)],
                )
                if rebuild_all or cursor.fetchone() is None:
                    for statement in _recount_sql(table, column, letters, quote):
                        cursor.execute(statement)
                    counted.append(relation_key(table, column))
        if models is None:
            _drop_stale_triggers(cursor, wanted, quote)
    return counted


def _drop_stale_triggers(cursor: Any, wanted: set[tuple[str, str]], quote: Any) -> None:
    """Drop triggers of ours whose keyword column is no longer declared (a removed field)."""
    cursor.execute(
        "SELECT c.relname, t.tgname FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid "
        "WHERE t.tgname LIKE %s AND NOT t.tgisinternal AND pg_table_is_visible(c.oid)",
        [TRIGGER_PREFIX + "%"],
    )
    for table, name in cursor.fetchall():
        if (table, name) not in wanted:
            cursor.execute(f"DROP TRIGGER IF EXISTS {quote(name)} ON {quote(table)}")


def rebuild(using: str = "default") -> list[str]:
    """Count every keyword column's statistics again from scratch (and reinstall the
    triggers); the keys counted."""
    return install(using, rebuild_all=True)


def stored(connection: Any, table: str, column: str) -> tuple[dict[str, int], dict[str, int]]:
    """``({weight: total}, {lexeme: df})`` as the statistics tables hold them (df 0 left out)."""
    relation = relation_key(table, column)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT weight, total FROM {TOTAL_TABLE} WHERE relation = %s", [relation])
        totals = {weight: int(total) for weight, total in cursor.fetchall()}
        cursor.execute(
            f"SELECT lexeme, df FROM {LEXEME_TABLE} WHERE relation = %s AND df <> 0", [relation]
        )
        dfs = {lexeme: int(df) for lexeme, df in cursor.fetchall()}
    return totals, dfs


def recount(
    connection: Any, table: str, column: str, letters: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """``({weight: total}, {lexeme: df})`` counted from the rows now, without writing."""
    totals_sql, lexemes_sql = _count_sql(table, column, letters, connection.ops.quote_name)
    with connection.cursor() as cursor:
        cursor.execute(totals_sql)
        totals = {weight: int(total) for _, weight, total in cursor.fetchall()}
        cursor.execute(lexemes_sql)
        dfs = {lexeme: int(df) for _, lexeme, df in cursor.fetchall()}
    return totals, dfs
