"""Models of the storage options for large tables (docs/scale.md): halfvec columns and the
binary-quantized index, with what every search path needs (full text, passages). The scale
benchmark (benchmarks/scale.py) loads them too."""

from __future__ import annotations

from django.db import models
from pgvector.django import HnswIndex

from django_sbert.fields import EmbeddingField
from django_sbert.passages import PassageConfig
from django_sbert.query import SemanticManager


class HalfArticle(models.Model):
    """``precision="float16"``: a ``halfvec`` column and its HNSW index (halfvec_cosine_ops)."""

    title = models.CharField(max_length=300)
    category = models.CharField(max_length=50, blank=True)
    embedding = EmbeddingField(source=("title",), precision="float16", keyword_search=True)

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
        indexes = [
            HnswIndex(
                name="halfarticle_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["halfvec_cosine_ops"],
            )
        ]


class HalfReport(models.Model):
    """A halfvec field with passages: the passage table keeps float32 vectors (``vector``)."""

    title = models.CharField(max_length=300)
    embedding = EmbeddingField(
        source=("title",), precision="float16", passages=PassageConfig(max_tokens=24, overlap=6)
    )

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
        indexes = [
            HnswIndex(
                name="halfreport_hnsw", fields=["embedding"], opclasses=["halfvec_cosine_ops"]
            )
        ]


class BinaryArticle(models.Model):
    """``binary_index=True`` on a halfvec column: no float index, only the binary codes'."""

    title = models.CharField(max_length=300)
    category = models.CharField(max_length=50, blank=True)
    embedding = EmbeddingField(
        source=("title",), precision="float16", binary_index=True, keyword_search=True
    )

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]


class MatryoshkaArticle(models.Model):
    """``dimensions=16``: the tiny encoder's 32-dimensional vectors cut to 16 and re-normalized
    (tests/settings.py declares MATRYOSHKA_DIMS for it), with keyword search for hybrid."""

    title = models.CharField(max_length=300)
    category = models.CharField(max_length=50, blank=True)
    embedding = EmbeddingField(source=("title",), dimensions=16, keyword_search=True)

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
        indexes = [
            HnswIndex(
                name="matryoshkaarticle_hnsw", fields=["embedding"], opclasses=["vector_cosine_ops"]
            )
        ]


class MatryoshkaReport(models.Model):
    """A truncated field with passages: the passage vectors are cut to 16 dimensions too."""

    title = models.CharField(max_length=300)
    embedding = EmbeddingField(
        source=("title",), dimensions=16, passages=PassageConfig(max_tokens=24, overlap=6)
    )

    objects = SemanticManager()

    class Meta:
        ordering = ["id"]
