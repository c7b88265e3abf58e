"""Celery tasks of indexing: thin wrappers over ``django_sbert.indexing``.

``embed_rows``
    Embed some rows of one field. Sent on commit by the ``post_save`` handler (one task per
    transaction and field), by ``sbert_reindex`` and by ``sweep``. Safe to run twice or
    concurrently: up-to-date rows are skipped and vectors are written only where the row's
    text is still the text that was encoded.
``sweep``
    Find rows whose vector is missing or stale (broker down at save time, ``bulk_create``,
    ``queryset.update()``, a killed worker, a new encoder version) and send ``embed_rows``
    tasks for them. Run it periodically with Celery beat (``django_sbert.celery``).

The indexing tasks run on ``SBERT["QUEUE"]`` ("sbert"), so encoding can have its own workers
(docs/commands.md, "Celery workers"). Task names are defined in ``django_sbert.celery``;
``django_sbert.tasks`` re-exports every task, which is where Celery's autodiscovery finds them.

``acks_late`` + ``reject_on_worker_lost``: a worker killed mid-task leaves the message on the
broker and another worker runs it again; whatever the killed one already wrote is skipped.

A bad row fails neither task: a row whose source raises or whose vector the database refuses
is recorded and skipped (``failures.py``), and the sweep does not send it again while it is
unchanged; an error in one field does not stop the sweep of the others.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from ..celery import EMBED_TASK, SWEEP_TASK
from ..conf import sbert_settings
from ..serving import worker as _worker_hooks  # noqa: F401  (connects the worker hooks)
from .embed import embed_pks, skip_fatal_chunk
from .refs import FieldRef, field_refs, get_ref
from .rows import EmbedStats, chunks
from .staleness import iter_stale_pks

# Rows per embedding task sent by the sweep and by sbert_reindex: a task short enough that a
# lost or redelivered one repeats little work, long enough that the broker carries few.
SWEEP_BATCH_SIZE = 500

logger = logging.getLogger(__name__)

# Errors worth retrying: the database restarting, a dropped connection, a failover.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)

# Publishing gives up quickly when the broker is unreachable: a web request must not hang on
# it, and the row is left for the sweep. About 1 s in all with these numbers.
PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 2,
    "interval_start": 0.0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}

# At most this many primary keys per task, so one huge transaction becomes a few tasks of
# bounded length (a redelivered task then repeats little work).
MAX_PKS_PER_TASK = 1000


@shared_task(
    bind=True,
    name=EMBED_TASK,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=10,
)
def embed_rows(
    self: Any,
    model_label: str,
    field_name: str,
    pks: list[Any],
    force: bool = False,
    deliveries: int = 1,
) -> dict[str, int]:
    """Embed rows ``pks`` of ``model_label.field_name``; returns the counts of ``EmbedStats``.

    ``deliveries``: how many times these rows were delivered to a worker that died running
    them (see ``poison_pill``); 1 for a task sent as usual.
    """
    ref = get_ref(model_label, field_name)
    delivery = getattr(self.request, "delivery_info", None) or {}
    if delivery.get("redelivered"):
        # Its worker died running it (or stopped before it ran): counted, not run here. Sent
        # again to the queue it came from (a worker may listen on another than QUEUE).
        queue = delivery.get("routing_key") or sbert_settings.QUEUE
        return asdict(poison_pill(ref, pks, force=force, deliveries=deliveries + 1, queue=queue))
    stats = embed_pks(ref, pks, force=force)
    return asdict(stats)


def poison_pill(
    ref: FieldRef, pks: list[Any], *, force: bool, deliveries: int, queue: str | None = None
) -> EmbedStats:
    """Handle a redelivered ``embed_rows`` message, its ``deliveries``-th delivery.

    ``acks_late`` + ``reject_on_worker_lost`` give the message to another worker when the one
    running it dies, and a chunk of huge texts that exhausts memory would kill every worker in
    turn, for ever. The broker only flags a redelivery, so the count travels in the message:
    before ``SBERT["MAX_DELIVERIES"]`` the rows are sent again as a new message counting this
    delivery (and this one is acknowledged, unrun); at it, the rows of the step the worker died
    in are recorded as skipped (``embed.skip_fatal_chunk``) and the rest are sent again as a
    fresh task. A redelivery after a warm shutdown counts too: it only costs a message.
    """
    limit = int(sbert_settings.MAX_DELIVERIES)
    if deliveries < limit:
        logger.warning(
            "%s: %d row(s) delivered again after their worker was lost (delivery %d of %d "
            "before they are skipped).",
            ref,
            len(pks),
            deliveries,
            limit,
        )
        enqueue_embed(
            ref, pks, force=force, chunk_size=len(pks) or 1, deliveries=deliveries, queue=queue
        )
        return EmbedStats()
    skipped, rest = skip_fatal_chunk(ref, pks, deliveries=deliveries)
    logger.error(
        "%s: the worker died %d time(s) running these rows; %d row(s) it died on are "
        "recorded as skipped (manage.py sbert_status), %d sent again.",
        ref,
        deliveries - 1,
        skipped,
        len(rest),
    )
    if rest:
        enqueue_embed(ref, rest, force=force, chunk_size=len(rest), queue=queue)
    return EmbedStats(skipped=skipped)


@shared_task(
    bind=True,
    name=SWEEP_TASK,
    acks_late=True,
    autoretry_for=TRANSIENT_ERRORS,
    retry_backoff=5,
    retry_backoff_max=300,
    max_retries=5,
)
def sweep(self: Any, expires: float | None = None) -> dict[str, int]:
    """Send ``embed_rows`` tasks for every stale row of every EmbeddingField.

    ``expires`` (seconds) is given to the tasks it sends: with a beat interval as long, a
    backlog bigger than the workers can finish before the next sweep is not queued twice;
    what expires is still stale and is sent again by the next sweep.

    Rows skipped after errors of their own are left out while unchanged, until their retry
    time. A field that raises is logged and the other fields are swept; the first such error
    is raised at the end, so the task is marked failed (and retried if the error is transient).
    """
    sent: dict[str, int] = {}
    errors: list[Exception] = []
    for ref in field_refs():
        try:
            rows = enqueue_stale(ref, expires=expires, leave_skipped=True)
        except Exception as exc:
            logger.exception("sweep: %s failed; the other fields are swept.", ref)
            errors.append(exc)
            continue
        if rows:
            sent[str(ref)] = rows
    if sent:
        logger.info("sweep: sent stale rows for embedding: %s", sent)
    if errors:
        raise errors[0]
    return sent


def enqueue_embed(
    ref: FieldRef,
    pks: Sequence[Any],
    *,
    force: bool = False,
    chunk_size: int = MAX_PKS_PER_TASK,
    expires: float | None = None,
    deliveries: int = 1,
    queue: str | None = None,
) -> int:
    """Send ``embed_rows`` tasks for ``pks`` (``chunk_size`` per task); returns tasks sent.

    ``deliveries`` (above 1 only for a message sent again by ``poison_pill``) travels with it;
    ``queue`` defaults to ``SBERT["QUEUE"]``.
    Raises the broker's error if it cannot be reached; the ``post_save`` handler catches it.
    """
    sent = 0
    kwargs: dict[str, Any] = {}
    if force:
        kwargs["force"] = True
    if deliveries > 1:
        kwargs["deliveries"] = deliveries
    for chunk in chunks(list(pks), max(1, chunk_size)):
        embed_rows.apply_async(
            args=(ref.label, ref.name, chunk),
            kwargs=kwargs or None,
            queue=queue or sbert_settings.QUEUE,
            retry=True,
            retry_policy=PUBLISH_RETRY_POLICY,
            expires=expires,
        )
        sent += 1
    return sent


def enqueue_stale(
    ref: FieldRef,
    *,
    chunk_size: int | None = None,
    expires: float | None = None,
    leave_skipped: bool = False,
) -> int:
    """Send tasks for every stale row of one field; returns how many rows were sent.

    ``leave_skipped``: not the rows skipped after errors of their own that are unchanged and
    not due for a retry (what the sweep asks).
    """
    size = int(chunk_size or SWEEP_BATCH_SIZE)
    rows = 0
    for pks in iter_stale_pks(ref, chunk_rows=size, leave_skipped=leave_skipped):
        enqueue_embed(ref, pks, chunk_size=size, expires=expires)
        rows += len(pks)
    return rows
