"""How large the vector indexes are against the memory that caches them, and rows that hold a
vector django-sbert did not write (docs/scale.md).

Check W022 warns when a database's HNSW indexes do not fit in ``effective_cache_size`` (or
``SBERT["INDEX"]["MEMORY"]``); check W021 counts rows with a vector but no encoder version,
which text searches cannot see until the sweep re-encodes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.core import checks
from django.db import DatabaseError, connections, router

from ..conf import sbert_settings
from ..fields import EmbeddingField, all_embedding_fields

UNVERSIONED_SAMPLE = 1000  # W021 counts up to this many rows per table (a bounded query)


@dataclass(frozen=True)
class IndexSize:
    """One HNSW index: its name, table and size on disk in bytes."""

    name: str
    table: str
    bytes: int


def hnsw_indexes(cursor: Any, table: str | None = None) -> list[IndexSize]:
    """Every HNSW index of the database (or of ``table``), largest first."""
    sql = (
        "SELECT ic.relname, t.relname, pg_relation_size(ic.oid) FROM pg_index i "
        "JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
        "JOIN pg_am am ON am.oid = ic.relam AND am.amname = 'hnsw'"
    )
    params: list[Any] = []
    if table is not None:
        sql += " WHERE i.indrelid = to_regclass(%s)"
        params.append('"' + table.replace('"', '""') + '"')
    cursor.execute(sql + " ORDER BY 3 DESC", params)
    return [IndexSize(name, tbl, int(size)) for name, tbl, size in cursor.fetchall()]


def memory_budget(cursor: Any) -> int:
    """Bytes the HNSW indexes should fit in: ``SBERT["INDEX"]["MEMORY"]`` (bytes, or a size that
    PostgreSQL reads, e.g. ``"12GB"``), else the server's ``effective_cache_size``."""
    value = sbert_settings.INDEX["MEMORY"]
    if value is None:
        cursor.execute("SELECT pg_size_bytes(current_setting('effective_cache_size'))")
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    else:
        cursor.execute("SELECT pg_size_bytes(%s)", [str(value)])
    return int(cursor.fetchone()[0])


def pretty(size: int) -> str:
    """``1.5 GB``, ``820 MB``: sizes as the docs and commands print them."""
    value = float(size)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit in ("bytes", "kB") else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"  # pragma: no cover


def check_scale(
    app_configs: Sequence[Any] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """W021 (rows with a vector but no version) and W022 (indexes larger than the memory)."""
    messages: list[checks.CheckMessage] = []
    fields = all_embedding_fields()
    if app_configs is not None:
        labels = {config.label for config in app_configs}
        fields = [(m, f) for m, f in fields if m._meta.app_label in labels]
    for alias in databases or ():
        used = [(m, f) for m, f in fields if router.allow_migrate_model(alias, m)]
        connection = connections[alias]
        if not used or connection.vendor != "postgresql":
            continue  # E001 reports a database that is not PostgreSQL
        try:
            with connection.cursor() as cursor:
                for model, field in used:
                    messages.extend(_unversioned(cursor, model, field))
                messages.extend(_too_large(cursor, alias))
        except DatabaseError:
            continue  # not migrated yet, or no pgvector: the other database checks say so
    return messages


def _unversioned(cursor: Any, model: type, field: EmbeddingField) -> list[checks.CheckMessage]:
    table = model._meta.db_table
    cursor.execute("SELECT to_regclass(%s)", ['"' + table.replace('"', '""') + '"'])
    if cursor.fetchone()[0] is None:
        return []
    quote = connections[router.db_for_read(model)].ops.quote_name
    version = model._meta.get_field(field.version_field_name).column
    cursor.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {quote(table)} WHERE {quote(field.column)} "
        f"IS NOT NULL AND {quote(version)} IS NULL LIMIT {UNVERSIONED_SAMPLE}) s"
    )
    count = int(cursor.fetchone()[0])
    if not count:
        return []
    shown = f"{count}" if count < UNVERSIONED_SAMPLE else f"at least {count}"
    return [
        checks.Warning(
            f"{shown} rows of {table} hold a vector in {field.column} but no encoder version "
            f"in {version}: they were written around django-sbert (bulk_create(), update(), "
            "SQL), so text searches leave them out until the sweep encodes them again.",
            hint="Load precomputed vectors with django_sbert.indexing.bulk_load(objs, vectors), "
            f"which writes the hash and version too; or run manage.py sbert_reindex "
            f"{model._meta.label}.{field.name} now.",
            obj=model,
            id="django_sbert.W021",
        )
    ]


def _too_large(cursor: Any, alias: str) -> list[checks.CheckMessage]:
    indexes = hnsw_indexes(cursor)
    total = sum(index.bytes for index in indexes)
    if not indexes:
        return []
    budget = memory_budget(cursor)
    if total <= budget:
        return []
    largest = ", ".join(f"{i.name} ({pretty(i.bytes)})" for i in indexes[:3])
    source = (
        "SBERT['INDEX']['MEMORY']"
        if sbert_settings.INDEX["MEMORY"] is not None
        else "effective_cache_size"
    )
    return [
        checks.Warning(
            f"The HNSW indexes of database {alias!r} take {pretty(total)} but {source} is "
            f"{pretty(budget)}: searches will read index pages from disk and slow down. "
            f"Largest: {largest}.",
            hint="Store vectors as halfvec (EmbeddingField(precision='float16')) or index "
            "binary codes (binary_index=True); or give PostgreSQL more memory (shared_buffers, "
            "effective_cache_size). See docs/scale.md.",
            id="django_sbert.W022",
        )
    ]
