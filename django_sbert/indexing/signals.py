"""Schedule embedding when rows are saved: ``post_save`` -> ``on_commit`` -> one Celery task.

Saves are collected per database connection in a buffer that is flushed once when the
transaction commits, so a transaction saving 1,000 articles sends one ``embed_rows`` task
(per field; split every ``tasks.MAX_PKS_PER_TASK`` rows), not 1,000. Outside a transaction
(autocommit) each save is its own commit and sends its own task.

Nothing here can make a save fail: if the broker cannot be reached the error is logged as a
warning and the row stays stale until the sweep (or ``sbert_reindex --stale``) embeds it.
A rolled-back transaction sends nothing; rows saved inside a rolled-back savepoint may still
be sent with the rest of the transaction, which is harmless (the task skips rows that do not
exist or are up to date). Django's own savepoint bookkeeping of ``on_commit`` hooks decides
what is sent: the buffer registers one hook and registers it again if a rollback drops it.

``bulk_create()`` and ``queryset.update()`` send no signals: the sweep finds those rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.local import Local
from django.apps import apps
from django.db import models, transaction
from django.db.models.signals import post_delete, post_save

from ..conf import sbert_settings
from ..fields import embedding_fields
from ..fields.columns import text_hash
from ..serving import encoder_version
from . import tasks
from .refs import field_refs, get_ref

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # ("app_label.Model", field name)

_state = Local()  # one buffer per database alias, per thread / asyncio task (like connections)


class PendingBatch:
    """Primary keys saved during one transaction on one database, sent when it commits."""

    def __init__(self, using: str, outer: object | None = None) -> None:
        self.using = using
        self.outer = outer  # the outermost atomic block it was started in (None: autocommit)
        self.pks: dict[Key, dict[Any, None]] = {}  # insertion-ordered sets
        self.flushed = False
        self.callback: Callable[[], None] = self.flush  # one object, found again by identity

    def add(self, key: Key, pk: Any) -> None:
        self.pks.setdefault(key, {})[pk] = None

    def discard(self, key: Key, pk: Any) -> None:
        self.pks.get(key, {}).pop(pk, None)

    def flush(self) -> None:
        """Send one task per field (the transaction committed). Never raises."""
        if self.flushed:
            return
        self.flushed = True
        batches = _batches()
        if batches.get(self.using) is self:
            del batches[self.using]
        for (label, name), pks in self.pks.items():
            if pks:
                send_embed_task(label, name, list(pks))


def _batches() -> dict[str, PendingBatch]:
    batches = getattr(_state, "batches", None)
    if batches is None:
        batches = _state.batches = {}
    return batches


def _registered(connection: Any, batch: PendingBatch) -> bool:
    return any(entry[1] is batch.callback for entry in connection.run_on_commit)


def _outermost_block(connection: Any) -> object | None:
    return connection.atomic_blocks[0] if connection.atomic_blocks else None


def current_batch(using: str) -> PendingBatch:
    """The buffer of the transaction open on ``using``.

    A buffer whose commit hook is gone was dropped by a rollback. If its transaction is over
    (autocommit now, or another outermost ``atomic`` block), its rows were never committed and
    it is discarded. Within the same transaction only a savepoint was rolled back: the buffer is
    kept (rows saved before the savepoint are real) and its hook registered again.
    """
    connection = transaction.get_connection(using)
    batches = _batches()
    batch = batches.get(using)
    if (
        batch is not None
        and not batch.flushed
        and not _registered(connection, batch)
        and (not connection.in_atomic_block or batch.outer is not _outermost_block(connection))
    ):
        batch = None
    if batch is None or batch.flushed:
        batch = batches[using] = PendingBatch(using, _outermost_block(connection))
    return batch


def schedule(ref_label: str, field_name: str, pk: Any, using: str) -> None:
    """Embed row ``pk`` once the current transaction on ``using`` commits (now in autocommit)."""
    batch = current_batch(using)
    batch.add((ref_label, field_name), pk)
    connection = transaction.get_connection(using)
    if not _registered(connection, batch):
        # Outside a transaction this runs the callback at once.
        transaction.on_commit(batch.callback, using=using)


def send_embed_task(model_label: str, field_name: str, pks: list[Any]) -> bool:
    """Publish ``embed_rows`` tasks; on any broker error log a warning and return False."""
    try:
        tasks.enqueue_embed(get_ref(model_label, field_name), pks)
    except Exception as exc:  # kombu/redis/amqp raise many types; none may break a save
        logger.warning(
            "django-sbert: could not queue embedding of %d %s row(s) for %r (%s: %s). They are "
            "left for the sweep task or `manage.py sbert_reindex --stale`.",
            len(pks),
            model_label,
            field_name,
            exc.__class__.__name__,
            exc,
        )
        return False
    return True


def _needs_embedding(field: Any, instance: models.Model, update_fields: Any) -> bool:
    """False when this save cannot have changed the field's text.

    Only decided for field-name sources: ``update_fields`` without any source field, or a full
    save (which writes the bookkeeping columns too) of an instance whose in-memory vector,
    hash and version already match its text and the current encoder.
    """
    sources = field.source_fields
    if sources is None:
        return True
    if update_fields is not None:
        return bool(set(update_fields) & set(sources))
    deferred = instance.get_deferred_fields()
    names = {*sources, field.attname, field.hash_field_name, field.version_field_name}
    if deferred & names or getattr(instance, field.attname) is None:
        return True
    try:
        current = encoder_version(field.encoder)
    except Exception:  # let the task report a broken encoder configuration
        return True
    return not (
        getattr(instance, field.hash_field_name) == text_hash(field.get_source_text(instance))
        and getattr(instance, field.version_field_name) == current
    )


def on_post_save(
    sender: type[models.Model],
    instance: models.Model,
    raw: bool = False,
    using: str = "default",
    update_fields: Any = None,
    **kwargs: Any,
) -> None:
    """``post_save`` handler: schedule the saved row's embedding fields."""
    if not sbert_settings.AUTO_EMBED:
        return
    for ref in field_refs(sender):
        if raw or _needs_embedding(ref.field, instance, update_fields):
            schedule(ref.label, ref.name, instance.pk, using)


def on_post_delete(
    sender: type[models.Model], instance: models.Model, using: str = "default", **kwargs: Any
) -> None:
    """``post_delete`` handler: drop the row from the pending batch (its vector went with it)."""
    batch = _batches().get(using)
    if batch is None or batch.flushed:
        return
    for ref in field_refs(sender):
        batch.discard((ref.label, ref.name), instance.pk)


def connect_signals() -> None:
    """Connect the handlers to every installed model that has an EmbeddingField.

    Called from ``SbertConfig.ready()``; subclasses (multi-table children, proxies) are
    connected too, since Django sends their signals with the subclass as sender.
    """
    for model in apps.get_models(include_auto_created=False):
        if not embedding_fields(model):
            continue
        uid = f"django_sbert.{model._meta.label_lower}"
        post_save.connect(on_post_save, sender=model, dispatch_uid=f"{uid}.post_save")
        post_delete.connect(on_post_delete, sender=model, dispatch_uid=f"{uid}.post_delete")
