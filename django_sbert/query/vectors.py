"""The query side of a vector search: a text, a row or a vector becomes one vector, and
the SQL pieces that compare it with a column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from django.db import models
from django.db.models import Value
from pgvector import Vector
from pgvector.django import CosineDistance

from ..fields import EmbeddingField, embedding_fields, vector_literal


def cosine_distance(embedding: EmbeddingField, vector: np.ndarray | str) -> CosineDistance:
    """``embedding <=> query``: the operator an HNSW index with vector_cosine_ops serves.

    ``vector`` may be given as its pgvector text already (``vector_literal``).
    """
    literal = vector if isinstance(vector, str) else vector_literal(vector)
    return CosineDistance(embedding.attname, Value(literal))


def as_vector(value: Any) -> np.ndarray:
    if isinstance(value, Vector):
        return value.to_numpy()
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            "similar_to() takes a text, a model instance or a vector (list / numpy array / "
            f"pgvector Vector), not {type(value).__name__}."
        ) from exc
    if vector.ndim != 1:
        raise TypeError(f"similar_to() takes one vector, got an array of shape {vector.shape}.")
    if not np.isfinite(vector).all():
        raise ValueError(
            "The query vector contains NaN or infinite values; cosine similarity is undefined "
            "for it. Check how it was computed."
        )
    return vector


def same_version(field: EmbeddingField, version: str | None) -> dict[str, str]:
    """Filter keywords that keep rows whose vector was encoded by ``version``."""
    return {} if version is None else {field.version_field_name: version}


def instance_vector(instance: models.Model, field: EmbeddingField) -> tuple[np.ndarray, str]:
    """The stored vector of ``instance`` for a field compatible with ``field``, and its
    encoder version (read together, so they belong to each other)."""
    candidates = [f for f in embedding_fields(type(instance)) if f.encoder == field.encoder]
    source = next((f for f in candidates if f.name == field.name), None) or (
        candidates[0] if len(candidates) == 1 else None
    )
    if source is None:
        raise ValueError(
            f"{instance._meta.label} has no EmbeddingField encoded by {field.encoder!r} to "
            "compare with; pass its vector instead."
        )
    deferred = instance.get_deferred_fields()
    if source.attname in deferred or source.version_field_name in deferred:
        value = version = None
    else:
        value = getattr(instance, source.attname)
        version = getattr(instance, source.version_field_name)
    if value is None and instance.pk is not None:
        value, version = (
            type(instance)
            ._base_manager.filter(pk=instance.pk)
            .values_list(source.attname, source.version_field_name)
            .first()
        ) or (None, None)
    if value is None:
        raise ValueError(
            f"{instance._meta.label} pk={instance.pk!r} has no embedding yet, so there is "
            "nothing to compare with. Wait for the worker, or run "
            f"manage.py sbert_reindex {instance._meta.label} --stale --sync."
        )
    return as_vector(value), version
