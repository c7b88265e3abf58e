"""``similar_to()``: nearest rows by cosine similarity, as an ordinary chainable queryset.

::

    class Article(models.Model):
        ...
        objects = SemanticManager()

    Article.objects.similar_to("central banks raise rates")[:10]         # text
    Article.objects.filter(category="economy").similar_to(article)[:5]   # more like this
    Article.objects.similar_to(vector, min_similarity=0.5).values("title", "similarity")

How it stays fast and correct (see docs/search.md):

* it orders by ``embedding <=> query`` (``CosineDistance``), the operator of an HNSW index built
  with ``vector_cosine_ops``; ordering by the ``similarity`` annotation would bypass the index;
* ``hnsw.ef_search``, ``hnsw.iterative_scan`` and ``hnsw.max_scan_tuples`` are set with
  ``set_config(..., is_local => true)`` inside a transaction that also runs the query: a
  ``SET LOCAL`` outside a transaction does nothing (pgvector #675);
* iterative index scans (pgvector >= 0.8) keep scanning until a filtered top-k has k rows;
* with ``relaxed_order`` scans the fetched rows are re-sorted by similarity in Python, since
  the index may return them slightly out of order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connections, models, transaction
from django.db.models import Value
from pgvector import Vector
from pgvector.django import CosineDistance

from .conf import sbert_settings
from .fields import EmbeddingField, embedding_fields

ITERATIVE_SCAN_MODES = ("off", "strict_order", "relaxed_order")


@dataclass(frozen=True)
class SearchOptions:
    """Per-query pgvector settings, applied by set_config(..., true) in the query's transaction."""

    k: int | None
    ef_search: int | None
    iterative_scan: str | None
    max_scan_tuples: int | None

    @classmethod
    def from_settings(cls, k: int | None = None, **overrides: Any) -> SearchOptions:
        search = sbert_settings.SEARCH
        values = {
            "ef_search": search.get("EF_SEARCH"),
            "iterative_scan": search.get("ITERATIVE_SCAN"),
            "max_scan_tuples": search.get("MAX_SCAN_TUPLES"),
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        scan = values["iterative_scan"]
        if scan is not None and scan not in ITERATIVE_SCAN_MODES:
            raise ValueError(
                f"iterative_scan must be one of {ITERATIVE_SCAN_MODES}, got {scan!r} "
                "(check SBERT['SEARCH']['ITERATIVE_SCAN'])."
            )
        return cls(k=k if k is not None else search.get("K"), **values)

    def config(self) -> list[tuple[str, str]]:
        pairs = [
            ("hnsw.ef_search", self.ef_search),
            ("hnsw.iterative_scan", self.iterative_scan),
            ("hnsw.max_scan_tuples", self.max_scan_tuples),
        ]
        return [(name, str(value)) for name, value in pairs if value is not None]


@contextmanager
def search_options(using: str, options: SearchOptions) -> Iterator[None]:
    """Run the block in a transaction whose pgvector settings are ``options``.

    The settings are transaction-local, so they vanish at COMMIT and never leak to other
    queries on a pooled connection. Nested in a caller's transaction, they last until that
    transaction ends (the usual SET LOCAL rule).
    """
    config = options.config()
    with transaction.atomic(using=using, savepoint=False):
        if config:
            placeholders = ", ".join("set_config(%s, %s, true)" for _ in config)
            params = [item for pair in config for item in pair]
            with connections[using].cursor() as cursor:
                cursor.execute(f"SELECT {placeholders}", params)
        yield


class SemanticQuerySet(models.QuerySet):
    """A QuerySet with ``similar_to()``; everything else is plain Django."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._search: SearchOptions | None = None
        self._search_ordering: tuple[Any, ...] = ()

    def _clone(self) -> SemanticQuerySet:
        clone = super()._clone()
        clone._search = self._search
        clone._search_ordering = self._search_ordering
        return clone

    def similar_to(
        self,
        query: str | models.Model | Sequence[float] | np.ndarray | Vector,
        k: int | None = None,
        min_similarity: float | None = None,
        field: str | None = None,
        *,
        ef_search: int | None = None,
        iterative_scan: str | None = None,
    ) -> SemanticQuerySet:
        """Rows nearest to ``query`` by cosine similarity, nearest first.

        ``query`` is a text (encoded in this process, cached), a model instance (more like
        this: its stored vector, the instance itself excluded) or a vector. Each row gets a
        ``similarity`` annotation (1 - cosine distance); rows without an embedding are left out.
        ``k`` caps the rows returned when the queryset is not sliced (default
        ``SBERT["SEARCH"]["K"]``); slicing, e.g. by a paginator, takes its place. The vector
        column itself is deferred; ``.defer(None)`` loads it with the rows.
        """
        embedding = self._embedding_field(field)
        exclude_pk = None
        if isinstance(query, models.Model):
            vector = _instance_vector(query, embedding)
            if query._meta.concrete_model is self.model._meta.concrete_model:
                exclude_pk = query.pk
        elif isinstance(query, str):
            from .encoders import encode_query

            vector = encode_query(query, embedding.encoder)
        else:
            vector = _as_vector(query)
        dimensions = embedding.get_dimensions()
        if len(vector) != dimensions:
            raise ValueError(
                f"The query vector has {len(vector)} dimensions but {self.model._meta.label}."
                f"{embedding.name} holds {dimensions}; encode it with encoder "
                f"{embedding.encoder!r}."
            )
        literal = Value(Vector(np.asarray(vector, dtype=np.float32)).to_text())
        distance = CosineDistance(embedding.attname, literal)
        qs = self.filter(**{f"{embedding.attname}__isnull": False})
        if exclude_pk is not None:
            qs = qs.exclude(pk=exclude_pk)
        if min_similarity is not None:
            qs = qs.alias(_sbert_distance=distance).filter(
                _sbert_distance__lte=1.0 - float(min_similarity)
            )
        qs = qs.annotate(similarity=1.0 - distance).order_by(distance)
        _, defer = qs.query.deferred_loading
        if defer:  # not after .only(...): respect an explicit choice of columns
            # The vector is the widest column (~4 KB of text at 384 dimensions) and is rarely
            # read from search results; chain .defer(None) to load it with the rows.
            qs = qs.defer(embedding.attname)
        qs._search = SearchOptions.from_settings(
            k=k, ef_search=ef_search, iterative_scan=iterative_scan
        )
        qs._search_ordering = qs.query.order_by
        return qs

    def _embedding_field(self, name: str | None) -> EmbeddingField:
        fields = embedding_fields(self.model)
        label = self.model._meta.label
        if name is not None:
            for candidate in fields:
                if candidate.name == name:
                    return candidate
            known = ", ".join(f.name for f in fields) or "none"
            raise ValueError(f"{label} has no EmbeddingField {name!r} (it has: {known}).")
        if len(fields) == 1:
            return fields[0]
        if not fields:
            raise ValueError(
                f"{label} has no EmbeddingField; add one, e.g. "
                "embedding = EmbeddingField(source=('title', 'body'))."
            )
        names = ", ".join(repr(f.name) for f in fields)
        raise ValueError(f"{label} has several EmbeddingFields ({names}); pass field=...")

    # -- execution ---------------------------------------------------------------------------

    def _limited(self) -> SemanticQuerySet:
        """Apply ``k`` when the caller has not sliced the queryset."""
        if self._search is None or self._search.k is None or self.query.high_mark is not None:
            return self
        self.query.set_limits(high=int(self._search.k))  # relative to an offset, if any
        return self

    def _fetch_all(self) -> None:
        if self._search is None or self._result_cache is not None:
            return super()._fetch_all()
        self._limited()
        with search_options(self.db, self._search):
            super()._fetch_all()
        if self._search.iterative_scan == "relaxed_order" and self._ordered_by_distance():
            self._result_cache = _resorted(self._result_cache)

    def _ordered_by_distance(self) -> bool:
        """Still ordered nearest first, as similar_to() left it (not re-ordered or reversed)."""
        return self.query.standard_ordering and self.query.order_by == self._search_ordering

    def iterator(self, chunk_size: int | None = None) -> Iterator[Any]:
        if self._search is None:
            yield from super().iterator(chunk_size)
            return
        self._limited()
        with search_options(self.db, self._search):
            yield from super().iterator(chunk_size)

    def explain(self, *, format: str | None = None, **options: Any) -> str:
        if self._search is None:
            return super().explain(format=format, **options)
        self._limited()
        with search_options(self.db, self._search):
            return super().explain(format=format, **options)


def _resorted(rows: list[Any]) -> list[Any]:
    """Sort rows by descending similarity when each carries it (instances or dicts)."""

    def key(row: Any) -> float | None:
        value = row.get("similarity") if isinstance(row, dict) else getattr(row, "similarity", None)
        return None if value is None else -float(value)

    keys = [key(row) for row in rows]
    if not rows or any(k is None for k in keys):
        return rows
    order = sorted(range(len(rows)), key=keys.__getitem__)  # stable: ties keep index order
    return [rows[i] for i in order]


def _as_vector(value: Any) -> np.ndarray:
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
    return vector


def _instance_vector(instance: models.Model, field: EmbeddingField) -> np.ndarray:
    """The stored vector of ``instance`` for a field compatible with ``field``."""
    candidates = [f for f in embedding_fields(type(instance)) if f.encoder == field.encoder]
    source = next((f for f in candidates if f.name == field.name), None) or (
        candidates[0] if len(candidates) == 1 else None
    )
    if source is None:
        raise ValueError(
            f"{instance._meta.label} has no EmbeddingField encoded by {field.encoder!r} to "
            "compare with; pass its vector instead."
        )
    value = getattr(instance, source.attname)
    if value is None and instance.pk is not None:
        value = (
            type(instance)
            ._base_manager.filter(pk=instance.pk)
            .values_list(source.attname, flat=True)
            .first()
        )
    if value is None:
        raise ValueError(
            f"{instance._meta.label} pk={instance.pk!r} has no embedding yet, so there is "
            "nothing to compare with. Wait for the worker, or run "
            f"manage.py sbert_reindex {instance._meta.label} --stale --sync."
        )
    return _as_vector(value)


class SemanticManager(models.Manager.from_queryset(SemanticQuerySet)):  # type: ignore[misc]
    """``objects = SemanticManager()`` gives ``Model.objects.similar_to(...)``."""
