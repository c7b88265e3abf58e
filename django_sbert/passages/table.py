"""The passage table of an ``EmbeddingField(passages=...)``: one model per field, made by the
field, so ``makemigrations`` writes its ``CreateModel`` (and its HNSW index) with the field.

For ``Article.embedding`` the model is ``ArticleEmbeddingPassage`` in the same app (table
``<app>_articleembeddingpassage``)::

    row      ForeignKey(Article, on_delete=CASCADE, related_name="embedding_passages")
    ordinal  the passage's position in the text, from 0
    start    character offset of the passage in the row's source text
    end      character offset just after it: text[start:end] is the passage
    text     the passage itself
    vector   vector(n), n read from the field's encoder; HNSW index with vector_cosine_ops

Why a table per field rather than one shared table: docs/passages.md ("Where passages live,
and why one table per field").

Only the serving version's passages live here. A version being promoted stages its passages in
``django_sbert.StagedPassage`` and the promotion's switch swaps them in, in the same
transaction as the rows' vectors (``finetuning/passages.py``).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from pgvector.django import HnswIndex, VectorField

from ..conf import encoder_config
from .config import model_spec

HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64


class PassageVectorField(VectorField):
    """A passage's vector: ``vector(n)`` with ``n`` read from the encoder's configuration when
    the column is created (like ``EmbeddingField``), unless ``dimensions`` is given."""

    def __init__(self, encoder: str = "default", dimensions: int | None = None, **kwargs: Any):
        self.encoder = encoder
        super().__init__(dimensions=dimensions, **kwargs)

    def deconstruct(self) -> tuple[Any, Any, Any, Any]:
        name, path, args, kwargs = super().deconstruct()
        if self.encoder != "default":
            kwargs["encoder"] = self.encoder
        return name, path, args, kwargs

    def get_dimensions(self) -> int:
        if self.dimensions is not None:
            return self.dimensions
        try:
            # Not fields.dimensions: the fields package imports this one.
            return model_spec(str(encoder_config(self.encoder)["MODEL"])).dimensions
        except (LookupError, OSError, ValueError) as exc:
            raise ImproperlyConfigured(
                f"Cannot read the vector size of encoder {self.encoder!r} for a passage table "
                f"({exc}). Install or configure the model (SBERT['ENCODERS'])."
            ) from exc

    def db_type(self, connection: Any) -> str:
        return f"vector({self.get_dimensions()})"


def passage_model_name(model: type[models.Model], field_name: str) -> str:
    """``ArticleEmbeddingPassage`` for ``Article.embedding``."""
    camel = "".join(part[:1].upper() + part[1:] for part in field_name.split("_"))
    return f"{model.__name__}{camel}Passage"


def _short_name(model: type[models.Model], field_name: str, suffix: str) -> str:
    """A stable index or constraint name within Django's 30 characters."""
    key = f"{model._meta.label_lower}.{field_name}".encode()
    return f"sbert_psg_{hashlib.sha256(key).hexdigest()[:10]}_{suffix}"


def make_passage_model(model: type[models.Model], field: models.Field) -> type[models.Model]:
    """Create (and register in the app) the passage model of ``field`` (an ``EmbeddingField``
    with passages) on ``model``."""
    name = passage_model_name(model, field.name)
    meta = type(
        "Meta",
        (),
        {
            "app_label": model._meta.app_label,
            "ordering": ["row", "ordinal"],
            "verbose_name": f"{model._meta.verbose_name} {field.name} passage",
            "indexes": [
                HnswIndex(
                    name=_short_name(model, field.name, "hnsw"),
                    fields=["vector"],
                    m=HNSW_M,
                    ef_construction=HNSW_EF_CONSTRUCTION,
                    opclasses=["vector_cosine_ops"],
                )
            ],
            "constraints": [
                models.UniqueConstraint(
                    fields=["row", "ordinal"], name=_short_name(model, field.name, "uniq")
                )
            ],
        },
    )
    attrs = {
        "__module__": model.__module__,
        "__doc__": f"Passages of {model._meta.label}.{field.name} (django-sbert).",
        "row": models.ForeignKey(
            model, on_delete=models.CASCADE, related_name=f"{field.name}_passages"
        ),
        "ordinal": models.PositiveIntegerField(),
        "start": models.PositiveIntegerField(),
        "end": models.PositiveIntegerField(),
        "text": models.TextField(),
        "vector": PassageVectorField(encoder=field.encoder, dimensions=field.dimensions),
        "Meta": meta,
        "__str__": _passage_str,
    }
    passage_model = type(name, (models.Model,), attrs)
    module = sys.modules.get(model.__module__)
    if module is not None and not hasattr(module, name):
        setattr(module, name, passage_model)  # importable like the site's own models
    return passage_model


def _passage_str(self: models.Model) -> str:
    text = self.text if len(self.text) <= 60 else self.text[:57] + "..."
    return f"#{self.ordinal} [{self.start}:{self.end}] {text}"


def passages_exist(field: models.Field) -> models.Q:
    """A condition on the field's model: the row has passages (empty for a field without).

    Indexing counts a row as embedded only with its vector *and* its passages, so a row that
    has a vector but no passages (written before ``passages=`` was turned on, or switched in
    from a version staged without them) is stale and the sweep embeds it again.
    """
    model = getattr(field, "passage_model", None)
    if model is None:
        return models.Q()
    return models.Q(models.Exists(model._base_manager.filter(row=models.OuterRef("pk"))))
