"""The one write a logged search or an event costs: not waiting for the disk, and kept from
breaking the request's own transaction.

Outside a transaction the INSERT commits with ``synchronous_commit`` off (PostgreSQL, for
this transaction only): the commit returns before the WAL reaches the disk, which on this kind
of machine takes a write from about 6 ms to 0.1 ms. With psycopg 3 the setting and the INSERT
share one round trip (pipeline mode), where BEGIN, SET, INSERT and COMMIT would take four. A
crash of the database server can lose the last fraction of a second of log entries (never
corrupt them, and never anything else); for a behaviour log that is the right trade. Inside a
transaction (``ATOMIC_REQUESTS``, a test) the write gets a savepoint instead, so a refused
write does not leave the request's transaction broken, and the request's own commit decides.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connections, models, transaction

from ..query.options import pipeline_supported


@contextlib.contextmanager
def isolated(database: str) -> Iterator[None]:
    """Run the log's one write statement: a quick commit of its own, or a savepoint inside a
    transaction. The statement must open no transaction of its own (pipeline mode)."""
    connection = connections[database]
    if connection.in_atomic_block:
        with transaction.atomic(using=database):
            yield
        return
    if connection.vendor != "postgresql":
        with transaction.atomic(using=database):
            yield
        return
    connection.ensure_connection()
    pipeline = getattr(connection.connection, "pipeline", None)
    if pipeline is not None and pipeline_supported():
        # psycopg 3: the setting and the INSERT go in one round trip, as one implicit
        # transaction that ends at the pipeline's Sync (errors surface there, as Django's).
        with connection.wrap_database_errors, pipeline():
            with connection.cursor() as cursor:
                cursor.execute(SYNCHRONOUS_COMMIT_OFF)
            yield
        return
    with transaction.atomic(using=database):
        with connection.cursor() as cursor:
            cursor.execute(SYNCHRONOUS_COMMIT_OFF)
        yield


def write(database: str, sql: str, params: Sequence[Any], *, fetch: bool = False) -> tuple | None:
    """Run one write statement ``isolated``, in one round trip where psycopg 3 allows; with
    ``fetch``, the first row it returns. Raw SQL: the ORM's compiling would cost more than the
    round trip on this path."""
    connection = connections[database]
    with isolated(database), connection.cursor() as cursor:
        cursor.execute(sql, params)
        # In pipeline mode the result is not known before it is fetched: ask, never test.
        return cursor.fetchone() if fetch else None


@functools.cache
def insert_sql(model: type[models.Model], database: str) -> str:
    """``INSERT INTO <table> (<every column>) VALUES (%s, ...)`` for ``model``."""
    quote = connections[database].ops.quote_name
    fields = model._meta.concrete_fields
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({values})"


def insert_params(instance: models.Model, database: str) -> list[Any]:
    """The values of ``instance``'s columns, in ``insert_sql``'s order, ready for the database."""
    connection = connections[database]
    return [
        field.get_db_prep_save(getattr(instance, field.attname), connection)
        for field in instance._meta.concrete_fields
    ]


# For the current transaction only (is_local): the request's other writes keep the default.
SYNCHRONOUS_COMMIT_OFF = "SELECT set_config('synchronous_commit', 'off', true)"
