"""Saved row -> stored vector: field refs, the write path, staleness, signals, embed and sweep
tasks.

::

    ref = get_ref("news.Article", "embedding")
    embed_pks(ref, [1, 2, 3])        # read, encode, write (skips rows already current)
    iter_stale_pks(ref)              # rows whose vector is missing or stale, a chunk at a time
    field_status(ref)                # counts for manage.py sbert_status
    skipped_rows(ref)                # rows skipped after errors of their own (SkippedRow)
    bulk_load(objs, vectors)         # insert rows with vectors computed elsewhere (COPY)

The public interface is ``__all__``: ``get_ref``, ``field_refs``, ``FieldRef``, ``embed_pks``,
``embed_stale``, ``EmbedStats``, ``Progress``, ``stale_queryset``, ``iter_stale_pks``,
``count_stale``, ``field_status``, ``FieldStatus``, ``skipped_rows``, ``bulk_load``. The other
names imported here are the wing's internals, kept importable for the other wings and the
tests; new code imports them from their modules.

Modules, in the order data flows: ``signals`` (post_save -> one task per transaction),
``tasks`` (Celery: embed_rows, sweep), ``embed`` (the loop), ``rows`` (read and encode),
``writes`` (live and staged writes), ``passages`` (a ``passages=`` field's rows: split,
encode, write and stage their passages), ``bulk`` (rows loaded with their vectors by COPY),
``staleness`` (what needs a vector), ``failures`` (rows skipped after errors of their own),
``refs`` (which fields exist), ``sizing`` (index sizes against memory, rows with a vector but
no version: checks W021, W022).
"""

from __future__ import annotations

from .bulk import bulk_load
from .embed import Progress, embed_pks, embed_stale
from .failures import skipped_rows
from .refs import FieldRef, field_refs, get_ref
from .rows import EmbedStats
from .staleness import FieldStatus, count_stale, field_status, iter_stale_pks, stale_queryset

# isort: split
# The wing's internals, not in __all__: importable here for the other wings and the tests.
from .embed import DEFAULT_CHUNK_ROWS  # noqa: F401
from .refs import check_configured, resolve_targets  # noqa: F401
from .rows import encode_rows, light_rows, read_pending  # noqa: F401
from .staleness import has_exact_sql_staleness  # noqa: F401
from .writes import VersionChanged, stage_pending, unstaged, write_vectors  # noqa: F401

__all__ = [
    "EmbedStats",
    "FieldRef",
    "FieldStatus",
    "Progress",
    "bulk_load",
    "count_stale",
    "embed_pks",
    "embed_stale",
    "field_refs",
    "field_status",
    "get_ref",
    "iter_stale_pks",
    "skipped_rows",
    "stale_queryset",
]
