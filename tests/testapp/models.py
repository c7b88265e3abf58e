"""Models used by every Django test: one per kind of EmbeddingField source."""

from __future__ import annotations

import json

from django.db import models
from pgvector.django import HnswIndex

from django_sbert.fields import EmbeddingField
from django_sbert.passages import PassageConfig
from django_sbert.query import SemanticManager


class Author(models.Model):
    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name


class Article(models.Model):
    """The canonical use: text fields as the source, an HNSW index with cosine ops, and the
    generated tsvector column (with its GIN index) for keyword and hybrid search."""

    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    category = models.CharField(max_length=50, blank=True, db_index=True)
    published = models.BooleanField(default=True)
    author = models.ForeignKey(Author, null=True, blank=True, on_delete=models.SET_NULL)
    embedding = EmbeddingField(source=("title", "body"), encoder="default", keyword_search=True)

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
        indexes = [
            HnswIndex(
                name="article_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            )
        ]

    def __str__(self) -> str:
        return self.title


class Note(models.Model):
    """A method on the model builds the text (source="embedding_text")."""

    text = models.TextField()
    tags = models.CharField(max_length=200, blank=True)
    embedding = EmbeddingField(source="embedding_text")

    objects = SemanticManager()

    def embedding_text(self) -> str:
        return f"{self.text}\ntags: {self.tags}" if self.tags else self.text


def product_text(product: Product) -> str:
    """Module-level, so migrations can reference it (like upload_to)."""
    return f"{product.name}. {product.description}"


class Product(models.Model):
    """A function taking the instance builds the text; no HNSW index (exact scans)."""

    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    embedding = EmbeddingField(source=product_text)

    objects = SemanticManager()


def document_text(document: Document) -> str:
    """The title inside a JSON payload: a payload that does not parse makes the source raise."""
    return json.loads(document.payload)["title"]


class Document(models.Model):
    """A source that can raise for one row (tests/indexing/test_bad_rows.py)."""

    payload = models.TextField()
    embedding = EmbeddingField(source=document_text)

    objects = SemanticManager()


class Report(models.Model):
    """Long texts indexed by their passages: small passages, so that the tiny model's 64-token
    window splits short test texts into several (tests/*/test_passages.py)."""

    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    category = models.CharField(max_length=50, blank=True, db_index=True)
    embedding = EmbeddingField(
        source=("title", "body"),
        keyword_search=True,
        passages=PassageConfig(max_tokens=24, overlap=6),
    )

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
        indexes = [
            HnswIndex(
                name="report_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            )
        ]

    def __str__(self) -> str:
        return self.title
