"""One model: a news article, embedded by django-sbert from its title and body."""

from __future__ import annotations

import re

from django.db import models
from django.urls import reverse
from pgvector.django import HnswIndex

from django_sbert.fields import EmbeddingField
from django_sbert.query import SemanticManager

LEAD_CHARS = 200  # a lead paragraph is the body's first sentences up to at least this long
LEAD_MAX_CHARS = 600
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])")


def lead_of(body: str) -> str:
    """The body's first sentences, about a news lead's length (``LEAD_CHARS``; never more than
    ``LEAD_MAX_CHARS``, cut at a word): what a reader sees under a headline."""
    lead = ""
    for sentence in SENTENCE_END.split(body.strip()):
        lead = f"{lead} {sentence}".strip()
        if len(lead) >= LEAD_CHARS:
            break
    if len(lead) > LEAD_MAX_CHARS:
        lead = lead[:LEAD_MAX_CHARS].rsplit(" ", 1)[0]
    return lead


class Category(models.TextChoices):
    ECONOMY = "economy", "Economy & business"
    POLITICS = "politics", "Politics & conflicts"
    BOTH = "both", "Economy & politics"  # Wikinews files some articles under both


class Article(models.Model):
    title = models.CharField(max_length=300)
    body = models.TextField()
    category = models.CharField(max_length=20, choices=Category.choices, db_index=True)
    published = models.DateField(null=True, blank=True)
    url = models.URLField(max_length=500, unique=True, help_text="The article on Wikinews.")

    # Encoded by a Celery worker on save (django_sbert.tasks.embed_rows): the article is split
    # into passages that fit the model's window, each encoded (384 numbers), and a search ranks
    # articles by their best passage; the row keeps the mean of its passages' vectors.
    # keyword_search: PostgreSQL also keeps a full-text column of title (weight A) and body
    # (B) with a GIN index, for keyword_search() and hybrid_search() (docs/hybrid.md).
    embedding = EmbeddingField(source=("title", "body"), passages=True, keyword_search=True)

    objects = SemanticManager()

    class Meta:
        ordering = ["-published", "-id"]
        indexes = [
            HnswIndex(
                name="article_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],  # similar_to() orders by cosine distance
            )
        ]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("articles:detail", args=[self.pk])

    @property
    def lead(self) -> str:
        """The lead paragraph (``lead_of``): the admin makes headline -> lead training pairs."""
        return lead_of(self.body)

    @property
    def categories(self) -> list[str]:
        """The plain categories this article belongs to (both for ``Category.BOTH``)."""
        if self.category == Category.BOTH:
            return [Category.ECONOMY, Category.POLITICS]
        return [self.category]
