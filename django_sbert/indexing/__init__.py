"""Saved row -> stored vector: field refs, the write path, staleness, signals, embed and sweep
tasks.

::

    ref = get_ref("news.Article", "embedding")
    embed_pks(ref, [1, 2, 3])        # read, encode, write (skips rows already current)
    iter_stale_pks(ref)              # rows whose vector is missing or stale, a chunk at a time
    field_status(ref)                # counts for manage.py sbert_status
    skipped_rows(ref)                # rows skipped after errors of their own (SkippedRow)
    bulk_load(objs, vectors)         # insert rows with vectors computed elsewhere (COPY)

Modules, in the order data flows: ``signals`` (post_save -> one task per transaction),
``tasks`` (Celery: embed_rows, sweep), ``embed`` (the loop), ``rows`` (read and encode),
``writes`` (live and staged writes), ``bulk`` (rows loaded with their vectors by COPY),
``staleness`` (what needs a vector), ``failures`` (rows skipped after errors of their own),
``refs`` (which fields exist).
"""

from __future__ import annotations

from .bulk import bulk_load
from .embed import DEFAULT_CHUNK_ROWS, Progress, embed_pks, embed_stale
from .failures import skipped_rows
from .refs import FieldRef, check_configured, field_refs, get_ref, resolve_targets
from .rows import EmbedStats, PendingRow, Pk, encode_rows, light_rows, read_pending
from .staleness import (
    FieldStatus,
    count_stale,
    field_status,
    has_exact_sql_staleness,
    iter_stale_pks,
    stale_condition,
    stale_queryset,
)
from .writes import (
    VersionChanged,
    WriteOutcome,
    stage_pending,
    stage_vectors,
    unstaged,
    write_rows,
    write_vectors,
)

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "EmbedStats",
    "FieldRef",
    "FieldStatus",
    "PendingRow",
    "Pk",
    "Progress",
    "VersionChanged",
    "WriteOutcome",
    "bulk_load",
    "check_configured",
    "count_stale",
    "embed_pks",
    "embed_stale",
    "encode_rows",
    "field_refs",
    "field_status",
    "get_ref",
    "has_exact_sql_staleness",
    "iter_stale_pks",
    "light_rows",
    "read_pending",
    "resolve_targets",
    "skipped_rows",
    "stage_pending",
    "stage_vectors",
    "stale_condition",
    "stale_queryset",
    "unstaged",
    "write_rows",
    "write_vectors",
]
