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
from collections.abc import Iterator

from django.db import connections, transaction


@contextlib.contextmanager
def isolated(database: str, *, pipelined: bool = False) -> Iterator[None]:
    """Run the log's one write: a quick commit of its own, or a savepoint inside a
    transaction. ``pipelined``: the write opens no transaction of its own (``Model.save()``
    does not; ``bulk_create()`` does, and cannot run in pipeline mode)."""
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
    if pipelined and pipeline is not None and _pipeline_supported():
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


# For the current transaction only (is_local): the request's other writes keep the default.
SYNCHRONOUS_COMMIT_OFF = "SELECT set_config('synchronous_commit', 'off', true)"


def _pipeline_supported() -> bool:
    try:
        from psycopg import Pipeline  # psycopg 3 only: psycopg 2 has no pipeline mode
    except ImportError:
        return False
    return bool(Pipeline.is_supported())
