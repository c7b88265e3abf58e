"""The index table: one row per indexed object, its text and its vector.

The vector is an ordinary ``EmbeddingField``, so everything django-sbert does for a model's
rows applies here too: the ``on_commit`` embed task, the sweep, versions, promotion and the
re-embedding after it, the keyword column for hybrid search.
"""

from __future__ import annotations

from django.contrib.contenttypes.models import ContentType
from django.db import models
from pgvector.django import HnswIndex

from django_sbert.fields import EmbeddingField
from django_sbert.query import SemanticManager


class SearchEntry(models.Model):
    """An object registered with Wagtail's ``index.Indexed``, as the backend searches it.

    ``title`` holds the boosted ``SearchField`` values (a ``boost`` above 1, or the field named
    ``title``) and weighs A in keyword search; ``body`` the others (weight B); the vector is
    of both, title first. ``autocomplete`` holds the ``AutocompleteField`` values.
    """

    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE, related_name="+")
    object_id = models.CharField(max_length=64)
    title = models.TextField(blank=True)
    body = models.TextField(blank=True)
    autocomplete = models.TextField(blank=True)
    embedding = EmbeddingField(
        source=("title", "body"),
        keyword_search=True,
        keyword_weights={"title": "A", "body": "B"},
        # Long StreamField bodies: ranked by their best passage, not by one vector of their
        # first 256 tokens (docs/passages.md).
        passages=True,
    )

    objects = SemanticManager()

    class Meta:
        verbose_name_plural = "search entries"
        constraints = [
            models.UniqueConstraint(
                fields=["content_type", "object_id"], name="sbert_wagtail_entry_unique"
            )
        ]
        indexes = [
            HnswIndex(
                name="sbert_wagtail_entry_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            models.Index(fields=["object_id"], name="sbert_wagtail_object_id"),
        ]

    def __str__(self) -> str:
        return f"{self.content_type_id}:{self.object_id} {self.title[:60]}"
