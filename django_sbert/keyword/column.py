"""The stored half of keyword search: the generated ``tsvector`` column of a field.

``EmbeddingField(source=("title", "body"), keyword_search=True)`` adds a generated column
``<name>_tsv``: ``setweight(to_tsvector(<config>, COALESCE(<field>, '')), <letter>)`` per
source field, joined with ``||`` (docs/hybrid.md).

PostgreSQL computes it on every INSERT and UPDATE (``queryset.update()``, raw SQL and
``bulk_create`` included), and a GIN index serves ``tsv @@ query``. The expression is immutable
because the text search configuration is named explicitly (``to_tsvector(text)`` without one
depends on ``default_text_search_config`` and is not allowed in a generated column).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.contrib.postgres.search import SearchVector
from django.db import models

DEFAULT_CONFIG = "english"
WEIGHT_LETTERS = ("A", "B", "C", "D")


def field_weights(
    fields: Sequence[str], weights: Sequence[str] | Mapping[str, str] | None
) -> list[str]:
    """One weight letter per source field: given per field, or A, B, C, D in source order."""
    if weights is None:
        return [WEIGHT_LETTERS[min(i, 3)] for i in range(len(fields))]
    if isinstance(weights, Mapping):
        return [str(weights.get(name, "D")).upper() for name in fields]
    return [str(letter).upper() for letter in weights]


def valid_weights(fields: Sequence[str], weights: Sequence[str] | Mapping[str, str] | None) -> bool:
    """One letter of A-D per source field (a mapping may not name other fields)."""
    if isinstance(weights, Mapping) and set(weights) - set(fields):
        return False
    letters = field_weights(fields, weights)
    return len(letters) == len(fields) and all(letter in WEIGHT_LETTERS for letter in letters)


def field_configs(fields: Sequence[str], config: str | Mapping[str, str]) -> list[str]:
    """One text search configuration per source field: ``config`` for all, or given per field
    (``{"title": "simple", "body": "german"}``; a field not named gets ``DEFAULT_CONFIG``)."""
    if isinstance(config, Mapping):
        return [str(config.get(name, DEFAULT_CONFIG)) for name in fields]
    return [str(config)] * len(fields)


def search_vector(
    fields: Sequence[str],
    config: str | Mapping[str, str],
    weights: Sequence[str] | Mapping[str, str] | None,
) -> SearchVector:
    """The weighted ``tsvector`` of ``fields``: what the generated ``<name>_tsv`` column holds."""
    letters = field_weights(fields, weights)
    configs = field_configs(fields, config)
    vectors = [
        SearchVector(name, config=field_config, weight=letter)
        for name, letter, field_config in zip(fields, letters, configs, strict=True)
    ]
    combined = vectors[0]
    for vector in vectors[1:]:
        combined = combined + vector
    return combined


def is_text_field(field: models.Field) -> bool:
    """Char and text fields: their values go into to_tsvector() as they are (immutable)."""
    return isinstance(field, models.CharField | models.TextField)
