"""The query side of a vector search: a text, a row or a vector becomes one vector, and
the SQL pieces that compare it with a column.

A text or a row's vector belongs to one encoder version, and a search compares it only with
rows of that version. If a promotion's switch commits between reading the version and running
the statement, every row already carries the new version and the search finds (almost)
nothing. ``QuerySource`` remembers where the vector came from so that the search can read it
again (``moved()``: the text encoded with the new serving version, or the row's new vector);
the vector and the version enter the SQL as ``QueryVector`` and ``SearchVersion``, which a
query marked with ``rebind()`` compiles with the new ones. The queryset itself is not changed:
the retry runs a marked copy (queryset.py).

A text becomes its vector here too, synchronously (``text_vector``: the serving version's
encode, refused on an event loop's thread), unless it is an ``EncodedText``, a ``str`` that
already carries the vector an async search encoded off the loop (aio.py).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.core.exceptions import SynchronousOnlyOperation
from django.db import models
from django.db.models import CharField, Expression, TextField
from django.db.models.sql.query import Query
from pgvector import Vector
from pgvector.django import CosineDistance

from ..encoder.matryoshka import truncate
from ..exceptions import UnversionedVector
from ..fields import EmbeddingField, embedding_fields
from ..fields.columns import vector_literal
from ..serving import encode_query, query_vector, serving_changed

REBOUND = "sbert_rebound"  # attribute of a Query: {QuerySource: Rebound} after a switch


class EncodedText(str):
    """A query text with its vector, encoded by ``encoder`` at ``version`` (a ``str``, so the
    searches read it as the text it is)."""

    encoder: str
    vector: np.ndarray
    version: str

    def __new__(cls, text: str, encoder: str, vector: np.ndarray, version: str) -> EncodedText:
        value = super().__new__(cls, text)
        value.encoder, value.vector, value.version = encoder, vector, version
        return value


def refuse_in_event_loop() -> None:
    """SynchronousOnlyOperation when called on an event loop's thread (a text encoded here
    would block it), unless ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set."""
    if not os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE") and _in_event_loop():
        raise SynchronousOnlyOperation(
            "similar_to() and hybrid_search() encode a text query where they are called, which "
            "would block the event loop: in async code use `await "
            "Model.objects.asimilar_to(text)` or `ahybrid_search(text)`."
        )


def text_vector(text: str, encoder: str, using: str | None = None) -> tuple[np.ndarray, str]:
    """A query text's vector and the version that encoded it: an ``EncodedText``'s own, else
    encoded here with the version serving on database ``using`` (``serving.query_vector``),
    which an event loop's thread may not do."""
    if isinstance(text, EncodedText) and text.encoder == encoder:
        return text.vector, text.version
    refuse_in_event_loop()
    return query_vector(str(text), encoder, using)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True)
class Rebound:
    """The version and query vector (pgvector text) a search runs with after a switch."""

    version: str
    literal: str


@dataclass(frozen=True)
class QuerySource:
    """Where a search's query vector came from: a text encoded with ``version``, or the stored
    vector of one row (``model``, ``pk``), which carried ``version``."""

    encoder: str
    version: str
    text: str | None = None
    model: type[models.Model] | None = None
    pk: Any = None
    vector_attname: str = ""
    version_attname: str = ""
    database: str | None = None  # the search's database, which said which version serves
    dimensions: int | None = None  # the searched field's size: a new vector is cut to it

    def fitted(self, vector: np.ndarray) -> np.ndarray:
        """``vector`` cut to the searched field's size (Matryoshka), as the first one was."""
        if self.dimensions is None or len(vector) <= self.dimensions:
            return vector
        return truncate(vector, self.dimensions)

    def moved(self) -> Rebound | None:
        """The version and vector to search with now, if the rows moved on from ``version``
        (a switch committed since it was read); else None. One indexed query."""
        if self.text is not None:
            version = serving_changed(self.encoder, self.version, self.database)
            if version is None:
                return None
            vector = self.fitted(encode_query(self.text, self.encoder, version))
            return Rebound(version, vector_literal(vector))
        if self.model is None or self.pk is None:
            return None
        row = (
            self.model._base_manager.using(self.database)
            .filter(pk=self.pk)
            .values_list(self.vector_attname, self.version_attname)
            .first()
        )
        if row is None or row[0] is None or row[1] in (None, self.version):
            return None
        return Rebound(row[1], vector_literal(self.fitted(as_vector(row[0]))))


def rebound_for(query: Query, source: QuerySource | None) -> Rebound | None:
    """What ``source`` is rebound to in ``query`` (and the queries built from it), if any."""
    bound = getattr(query, REBOUND, None)
    return None if bound is None or source is None else bound.get(source)


def rebind(query: Query, source: QuerySource, rebound: Rebound) -> None:
    """Make ``query`` (and every clone made from it later) search with ``rebound``."""
    setattr(query, REBOUND, {**(getattr(query, REBOUND, None) or {}), source: rebound})


class QueryVector(Expression):
    """The query vector as a parameter (pgvector text) cast to the type of ``column``, the
    field it is compared with; in a rebound query, the new one.

    The cast (``::vector(384)``, ``::halfvec(384)``) makes ``<=>`` see the column's own type
    on both sides, which the column's HNSW index (``vector_cosine_ops`` /
    ``halfvec_cosine_ops``) needs to serve the ORDER BY. Every search path builds its query
    vector here.
    """

    output_field = TextField()

    def __init__(self, literal: str, source: QuerySource | None = None, column: Any = None) -> None:
        super().__init__()
        self.literal = literal
        self.source = source
        self.column = column

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        rebound = rebound_for(compiler.query, self.source)
        cast = "" if self.column is None else f"::{self.column.db_type(connection)}"
        return f"%s{cast}", [rebound.literal if rebound is not None else self.literal]


class SearchVersion(Expression):
    """The encoder version rows must carry to be compared; in a rebound query, the new one."""

    output_field = CharField()

    def __init__(self, source: QuerySource) -> None:
        super().__init__()
        self.source = source

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        rebound = rebound_for(compiler.query, self.source)
        return "%s", [rebound.version if rebound is not None else self.source.version]


def cosine_distance(
    embedding: EmbeddingField, vector: np.ndarray | str, source: QuerySource | None = None
) -> CosineDistance:
    """``embedding <=> query``: the operator an HNSW index with vector_cosine_ops serves.

    ``vector`` may be given as its pgvector text already (``vector_literal``); ``source`` says
    where it came from, so that a search can run again with the vector of a new version.
    """
    literal = vector if isinstance(vector, str) else vector_literal(vector)
    return CosineDistance(embedding.attname, QueryVector(literal, source, embedding))


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


def same_version(field: EmbeddingField, source: QuerySource | None) -> dict[str, Any]:
    """Filter keywords that keep rows encoded by the version of the query's vector (none for
    a vector passed in)."""
    return {} if source is None else {field.version_field_name: SearchVersion(source)}


def instance_vector(
    instance: models.Model, field: EmbeddingField, using: str | None = None
) -> tuple[np.ndarray, QuerySource | None]:
    """The stored vector of ``instance`` for a field compatible with ``field``, and where it
    came from: its row and encoder version (read together, so they belong to each other).
    ``using``: the search's database, where a vector not loaded with the instance is read."""
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
            ._base_manager.using(using)
            .filter(pk=instance.pk)
            .values_list(source.attname, source.version_field_name)
            .first()
        ) or (None, None)
    if value is None:
        raise ValueError(
            f"{instance._meta.label} pk={instance.pk!r} has no embedding yet, so there is "
            "nothing to compare with. Wait for the worker, or run "
            f"manage.py sbert_reindex {instance._meta.label} --stale --sync."
        )
    if version is None:
        # Without a version there is nothing to keep the search to one version's rows: it
        # would rank the vectors of every version together (the sweep re-embeds the row).
        raise UnversionedVector(
            f"{instance._meta.label} pk={instance.pk!r} has a vector but no encoder version "
            f"({source.version_field_name} is empty: written outside django-sbert?), so it "
            "cannot be compared with rows of one version. The sweep re-embeds it, or run "
            f"manage.py sbert_reindex {instance._meta.label} --stale --sync; to search with "
            "the vector anyway, pass the vector itself."
        )
    # Another field of the same encoder may store more dimensions: cut to this one's.
    vector = field.fit_vectors(as_vector(value))
    return vector, QuerySource(
        encoder=field.encoder,
        version=version,
        model=type(instance),
        pk=instance.pk,
        vector_attname=source.attname,
        version_attname=source.version_field_name,
        database=using,
        dimensions=field.get_dimensions(),
    )
