"""The writing half of the Wagtail backend: Wagtail's index of every indexed model is
django-sbert's ``SearchEntry`` table (docs/wagtail.md).

``add()`` writes an object's texts to its row, whose ``post_save`` sends it to the embed task
on commit; ``update_index`` (``SbertRebuilder``) writes rows in bulk and embeds the stale ones
in its own process, with progress, or leaves them to the worker.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models.functions import Cast
from modelsearch.backends.base import BaseIndex, BaseSearchBackend, get_model_root
from modelsearch.index import get_indexed_models
from modelsearch.utils import get_descendants_content_types_pks

from django_sbert.indexing import embed_stale, get_ref
from django_sbert.indexing.signals import schedule

from .entries import entry_texts
from .models import SearchEntry


def object_ids(queryset: models.QuerySet) -> models.QuerySet:
    """The queryset's primary keys as the text ``SearchEntry.object_id`` holds (a subquery)."""
    return (
        queryset.order_by()
        .annotate(_sbert_object_id=Cast("pk", models.CharField()))
        .values("_sbert_object_id")
    )


class SbertIndex(BaseIndex):
    """The one index: the ``SearchEntry`` table, for every indexed model."""

    def __init__(self, backend: BaseSearchBackend) -> None:  # backend.SbertSearchBackend
        super().__init__(backend)
        self.defer_embedding = False  # update_index embeds in finish(), not through tasks

    def reset(self) -> None:
        SearchEntry.objects.all().delete()

    def refresh(self) -> None:
        """Make what was just added searchable now: embed the rows still without a current
        vector in this process (as ``update_index`` does) instead of waiting for the worker."""
        embed_stale(get_ref(SearchEntry._meta.label, "embedding"))

    def add_item(self, obj: models.Model) -> None:
        """One object (a save): ``update_or_create`` sends ``post_save``, whose handler sends
        the row to the embed task on commit, only when its text changed."""
        texts = entry_texts(obj)
        SearchEntry.objects.update_or_create(
            content_type=ContentType.objects.get_for_model(type(obj)),
            object_id=str(obj.pk),
            defaults=texts,
        )

    def add_items(self, model: type[models.Model], items: Iterable[models.Model]) -> None:
        """Many objects (``update_index``, ``add_bulk``): one upsert, no signals, so the rows
        are scheduled here (the embed task skips those whose text and version are current)."""
        if not model.get_search_fields():
            return
        content_type = ContentType.objects.get_for_model(model)
        rows = [
            SearchEntry(content_type=content_type, object_id=str(obj.pk), **entry_texts(obj))
            for obj in items
        ]
        if not rows:
            return
        written = SearchEntry.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["content_type", "object_id"],
            update_fields=["title", "body", "autocomplete"],
        )
        if self.defer_embedding:
            return
        using = SearchEntry.objects.db
        for row in written:
            schedule(SearchEntry._meta.label, "embedding", row.pk, using)

    def delete_item(self, item: models.Model) -> None:
        SearchEntry.objects.filter(
            content_type_id__in=get_descendants_content_types_pks(get_model_root(type(item))),
            object_id=str(item.pk),
        ).delete()

    def delete_stale_entries(self) -> int:
        """Delete the rows of objects that no longer exist; returns how many."""
        deleted = 0
        for model in get_indexed_models():
            if model._meta.parents:
                continue  # a child's rows go with its root model's
            deleted += (
                SearchEntry.objects.filter(
                    content_type_id__in=get_descendants_content_types_pks(model)
                )
                .exclude(object_id__in=object_ids(model._default_manager.all()))
                .delete()[0]
            )
        return deleted


class SbertRebuilder:
    """``update_index``: drop the rows of deleted objects, write every object's row, then
    embed the stale rows here with progress (or leave them to the worker)."""

    def __init__(self, index: SbertIndex) -> None:
        self.index = index

    def start(self) -> SbertIndex:
        self.index.defer_embedding = self.index.backend.update_index_embeds
        self.index.delete_stale_entries()
        return self.index

    def finish(self) -> None:
        ref = get_ref(SearchEntry._meta.label, "embedding")
        if not self.index.defer_embedding:
            return  # each chunk was scheduled for the worker as it was written
        done = [0]

        def progress(rows: int) -> None:
            done[0] += rows
            sys.stdout.write(f"django-sbert: embedded {done[0]} rows\n")
            sys.stdout.flush()

        embed_stale(ref, progress=progress)
        self.index.defer_embedding = False
