"""The one write a logged search or an event costs: not waiting for the disk, and kept from
breaking the request's own transaction.

Outside a transaction the INSERT commits with ``synchronous_commit`` off (PostgreSQL, for
this transaction only): the commit returns before the WAL reaches the disk, which on this kind
of machine takes a write from about 6 ms to 0.1 ms. A crash of the database server can lose
the last fraction of a second of log entries (never corrupt them, and never anything else);
for a behaviour log that is the right trade. Inside a transaction (``ATOMIC_REQUESTS``, a
test) the write gets a savepoint instead, so a refused write does not leave the request's
transaction broken, and the request's own commit decides.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connections, transaction


@contextlib.contextmanager
def isolated(database: str) -> Iterator[None]:
    """Run the log's one write: a quick commit of its own, or a savepoint inside a
    transaction."""
    connection = connections[database]
    if connection.in_atomic_block:
        with transaction.atomic(using=database):
            yield
        return
    with transaction.atomic(using=database):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield
