"""Turn saved rows into stored vectors: read, encode, write, a chunk at a time.

Everything here is plain Django + the encoder; the Celery tasks (``tasks.py``), the signal
handlers (``signals.py``) and the management commands are thin callers of these functions.

Bookkeeping lives in three companion columns that ``EmbeddingField`` adds beside each vector:
``<name>_hash`` (sha256 of the text the stored vector was computed from), ``<name>_version``
(the encoder version that computed it) and ``<name>_updated_at``. Which rows need a vector is
``staleness.py``; how a vector is written without racing edits or a switch is ``writes.py``.

Versions (docs/fine-tuning.md): "the current encoder" is the encoder's *serving* version
(``serving.serving_record``). While a new version is being promoted, rows embedded here are also
encoded with it and staged (``writes.stage_pending``); a write whose version stopped serving
because the switch committed meanwhile is refused under the switch lock and the chunk is
encoded again with the new version.

One bad row never blocks the others (``failures.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.utils import timezone

from ..serving import promoting_version
from .failures import WORKER_LOST, RowFailure, forget, record, waiting_hashes
from .passages import encode_with_passages, has_passages
from .refs import FieldRef, Pk
from .rows import EmbedStats, chunks, read_pending
from .staleness import iter_stale_pks
from .writes import VersionChanged, stage_pending, write_rows

logger = logging.getLogger(__name__)

Progress = Callable[[int], Any]  # called with the number of rows just handled (tqdm.update)

# Rows read, encoded and written per step of embed_pks(): each step is one short write
# transaction, so a killed worker loses at most one step's work.
DEFAULT_CHUNK_ROWS = 256
# Rows per step for a field with passages=: a row may hold hundreds of passages (342 for
# all-MiniLM-L6-v2 at MAX_CHUNKS=64), each a vector of its own, so a step of 32 rows holds at
# most about 11k passage vectors (17 MB at 384 dimensions) rather than 87k.
PASSAGE_CHUNK_ROWS = 32


def step_rows(ref: FieldRef, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> int:
    """Rows per step of ``embed_pks`` for ``ref``: ``chunk_rows``, at most
    ``PASSAGE_CHUNK_ROWS`` for a field with passages."""
    size = max(1, int(chunk_rows))
    return min(size, PASSAGE_CHUNK_ROWS) if has_passages(ref) else size


def embed_pks(
    ref: FieldRef,
    pks: Iterable[Pk],
    *,
    force: bool = False,
    batch_size: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
) -> EmbedStats:
    """Embed rows ``pks`` of one field: skip up-to-date rows, encode in batches, write safely.

    Works through the rows ``chunk_rows`` at a time (read, encode, write, commit), so a worker
    killed part-way keeps what it finished. ``progress(n)`` is called after each chunk. A row
    whose source raises or whose vector the database refuses is recorded and skipped
    (``stats.skipped``); the others are embedded.
    """
    ordered = list(dict.fromkeys(pks))
    version = ref.version()
    # A version being promoted gets the vectors of rows saved meanwhile too (staged).
    candidate = promoting_version(ref.encoder_name)
    stats = EmbedStats()
    seconds = {"read": 0.0, "encode": 0.0, "write": 0.0}  # where the time goes (debug log)
    for chunk in chunks(ordered, step_rows(ref, chunk_rows)):
        chunk_started = timezone.now()
        for _attempt in range(3):
            started = time.perf_counter()
            pending, chunk_stats = read_pending(ref, chunk, force=force, version=version)
            seconds["read"] += time.perf_counter() - started
            if not pending:
                break
            started = time.perf_counter()
            # A field with passages=: each row's passages too, and its vector derived from them.
            vectors, passages = encode_with_passages(ref, pending, batch_size, version)
            seconds["encode"] += time.perf_counter() - started
            started = time.perf_counter()
            try:
                outcome = write_rows(ref, pending, vectors, version, passages)
            except VersionChanged as exc:
                # A promotion switched versions while this chunk was encoded: redo the chunk
                # with the version that serves now.
                version = exc.serving
                candidate = promoting_version(ref.encoder_name)
                continue
            seconds["write"] += time.perf_counter() - started
            chunk_stats.embedded = outcome.written
            chunk_stats.skipped += outcome.skipped
            chunk_stats.changed = len(pending) - outcome.written - outcome.skipped
            if candidate is not None and candidate != version:
                stage_pending(ref, pending, candidate, batch_size)
            break
        stats += chunk_stats
        # Rows not recorded again in this chunk were embedded, current, changed or deleted.
        forget(ref, chunk, before=chunk_started)
        if progress is not None:
            progress(len(chunk))
    if stats.changed:
        logger.info(
            "%s: %d rows changed while being encoded; left for their own task.", ref, stats.changed
        )
    if stats.skipped:
        logger.info(
            "%s: %d row(s) skipped after errors of their own (see manage.py sbert_status); "
            "%d embedded.",
            ref,
            stats.skipped,
            stats.embedded,
        )
    logger.debug(
        "%s: %d rows embedded, %d up to date; read %.3f s, encode %.3f s, write %.3f s",
        ref,
        stats.embedded,
        stats.up_to_date,
        seconds["read"],
        seconds["encode"],
        seconds["write"],
    )
    return stats


def embed_stale(
    ref: FieldRef,
    *,
    limit: int | None = None,
    batch_size: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: Progress | None = None,
) -> EmbedStats:
    """Find and embed up to ``limit`` stale rows of one field, in the calling process."""
    stats = EmbedStats()
    for pks in iter_stale_pks(ref, chunk_rows=chunk_rows, limit=limit):
        stats += embed_pks(
            ref, pks, batch_size=batch_size, chunk_rows=chunk_rows, progress=progress
        )
    return stats


class WorkerLost(Exception):
    """What a skipped row's record says when the worker embedding its chunk died."""


def skip_fatal_chunk(
    ref: FieldRef,
    pks: Iterable[Pk],
    *,
    deliveries: int,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> tuple[int, list[Pk]]:
    """Record as skipped the rows a task's worker died on; return how many, and the rows
    after them.

    Called at the last delivery of a task whose worker died each time (``tasks.embed_rows``,
    ``SBERT["MAX_DELIVERIES"]``). The task works through its rows a step at a time and commits
    each step, so the step it died in is the first that still has rows to embed (rows recorded
    and waiting for their retry time left out): those rows are recorded (``SkippedRow``,
    retried by the sweep after their back-off, or at once after an edit) and the rows after
    that step are returned, to be sent again. Nothing is encoded here.
    """
    ordered = list(dict.fromkeys(pks))
    version = ref.version()
    size = step_rows(ref, chunk_rows)
    for start in range(0, len(ordered), size):
        chunk = ordered[start : start + size]
        pending, _ = read_pending(ref, chunk, version=version)
        waiting = waiting_hashes(ref, chunk, version)
        fatal = [row for row in pending if waiting.get(str(row.pk)) != row.hash]
        if not fatal:
            continue
        error = WorkerLost(
            f"The worker embedding this row's chunk died {deliveries - 1} time(s) (out of "
            f"memory?); skipped at delivery {deliveries} (SBERT['MAX_DELIVERIES'])."
        )
        record(ref, [RowFailure(row.pk, WORKER_LOST, error, row.hash) for row in fatal], version)
        return len(fatal), ordered[start + size :]
    return 0, []
