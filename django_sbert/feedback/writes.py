"""The one write a logged search or an event costs, kept from breaking the request's own
transaction."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import transaction
from django.db.transaction import get_connection


def isolated(database: str) -> Any:
    """A savepoint inside a transaction (``ATOMIC_REQUESTS``, a test), so that a refused
    write does not leave the request's transaction broken; nothing extra outside one."""
    if get_connection(database).in_atomic_block:
        return transaction.atomic(using=database)
    return contextlib.nullcontext()
