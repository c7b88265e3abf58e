"""``EmbeddingField``: a pgvector ``VectorField`` that knows which text it embeds, with its
companion columns, its indexes and its vector size (the package docstring tells the story).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from django import forms
from django.apps import apps
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models
from django.db.models import Func, TextField, Value
from django.db.models.functions import Cast, Coalesce
from pgvector import Vector
from pgvector.django import VectorField

from ..encoder.matryoshka import truncate
from ..indexes import binary_index, binary_index_name
from ..keyword.column import DEFAULT_CONFIG, search_vector, valid_weights
from ..passages import PassageConfig, make_passage_model, passage_config
from .checks import EmbeddingFieldChecks
from .columns import PRECISIONS, TEXT_FIELD_TYPES, ConcatWS, Sha256Hex, text_hash
from .dimensions import encoder_dimensions, matryoshka_dims
from .forms import EmbeddingFormField, vector_list

Source = tuple[str, ...] | str | Callable[[models.Model], str]


class _EmptyValues:
    """``value in field.empty_values`` without comparing numpy arrays elementwise.

    ``Model.clean_fields()`` tests ``raw_value in f.empty_values``; with a list of empty values,
    a numpy array raises "truth value of an array is ambiguous" (pgvector-python #21, #99).
    """

    def __contains__(self, value: object) -> bool:
        if value is None:
            return True
        if isinstance(value, str | list | tuple | dict):
            return len(value) == 0
        return False

    def __iter__(self):  # the few callers that iterate get the classic list
        return iter([None, "", [], (), {}])


class EmbeddingField(EmbeddingFieldChecks, VectorField):
    """A sentence embedding of other fields of the row, kept up to date by django-sbert."""

    description = "Sentence embedding"
    empty_values = _EmptyValues()  # type: ignore[assignment]
    _defaults = {"null": True, "blank": True, "editable": False}

    def __init__(
        self,
        source: Source | None = None,
        encoder: str = "default",
        dimensions: int | None = None,
        keyword_search: bool = False,
        keyword_config: str | Mapping[str, str] = DEFAULT_CONFIG,
        keyword_weights: Sequence[str] | Mapping[str, str] | None = None,
        passages: bool | PassageConfig = False,
        precision: str = "float32",
        binary_index: bool = False,
        **kwargs: Any,
    ) -> None:
        """``keyword_search=True`` adds the generated ``<name>_tsv`` column and its GIN index.

        ``keyword_config`` is the PostgreSQL text search configuration (stemming, stop words),
        one for all source fields or one per field (``{"title": "simple", "body": "german"}``);
        ``keyword_weights`` a weight letter per source field (``("A", "B")`` or
        ``{"title": "A", "body": "B"}``); by default A, B, C, D in source order.
        ``passages=True`` (or a ``PassageConfig``) also indexes the text by its passages, in a
        passage table of its own, and text searches rank rows by their best passage
        (docs/passages.md).
        ``precision="float16"`` stores the vector as pgvector's ``halfvec`` (half the bytes;
        pair it with an HNSW index using ``halfvec_cosine_ops``); ``"float32"``, the default,
        as ``vector`` (docs/scale.md). ``binary_index=True`` adds an HNSW index over the
        vectors' 1-bit codes and makes searches take the top ``k x oversample`` rows by
        Hamming distance, re-ranked by exact cosine (query/binary.py, docs/scale.md).
        ``dimensions`` defaults to the encoder's width; a smaller one stores the encoder's
        vectors cut to that size and re-normalized (Matryoshka), for an encoder whose
        ``MATRYOSHKA_DIMS`` lists it (check E023; docs/scale.md).
        """
        for key, value in self._defaults.items():
            kwargs.setdefault(key, value)
        if isinstance(source, list):
            source = tuple(source)
        if isinstance(keyword_weights, list):
            keyword_weights = tuple(keyword_weights)
        self.source = source
        self.encoder = encoder
        self.keyword_search = keyword_search
        self.keyword_config = keyword_config
        self.keyword_weights = keyword_weights
        self.passages = passages
        self.precision = precision
        self.binary_index = binary_index
        self.passage_model: type[models.Model] | None = None  # set when the model is ready
        super().__init__(dimensions=dimensions, **kwargs)

    # -- migrations -------------------------------------------------------------------------

    def deconstruct(self) -> tuple[Any, Any, Any, Any]:
        name, path, args, kwargs = super().deconstruct()
        # Migrations name the field by its documented path, whichever module defines it.
        path = "django_sbert.fields.EmbeddingField"
        for key, default in self._defaults.items():
            kwargs.pop(key, None)
            if getattr(self, key) != default:
                kwargs[key] = getattr(self, key)
        if self.source is not None:
            kwargs["source"] = self.source
        if self.encoder != "default":
            kwargs["encoder"] = self.encoder
        if self.keyword_search:
            kwargs["keyword_search"] = True
        if self.keyword_config != DEFAULT_CONFIG:
            kwargs["keyword_config"] = self.keyword_config
        if self.keyword_weights is not None:
            kwargs["keyword_weights"] = self.keyword_weights
        if self.passages:
            kwargs["passages"] = self.passages
        if self.precision != "float32":
            kwargs["precision"] = self.precision
        if self.binary_index:
            kwargs["binary_index"] = True
        return name, path, args, kwargs

    def contribute_to_class(self, cls: type[models.Model], name: str, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, **kwargs)
        # Abstract models: each concrete child gets its own copy of this field, which adds the
        # companions there. Historical models ("__fake__") take them from the migration state.
        if cls._meta.abstract or cls.__module__ == "__fake__":
            return
        existing = {f.name for f in cls._meta.local_fields}
        for companion_name, companion in self._companions(cls):
            if companion_name not in existing:
                cls.add_to_class(companion_name, companion)
        if self.keyword_search and self.tsvector_field_name in {
            f.name for f in cls._meta.local_fields
        }:
            self._add_gin_index(cls)
        if self.binary_index:
            self._add_binary_index(cls)
        if self.passage_config is not None:
            # The passage table points at this model: made once the model class is complete.
            models.signals.class_prepared.connect(self._add_passage_model, sender=cls, weak=False)

    def _add_passage_model(self, sender: type[models.Model], **kwargs: Any) -> None:
        if self.passage_model is None and isinstance(self.passage_config, PassageConfig):
            self.passage_model = make_passage_model(sender, self)

    def _companions(self, cls: type[models.Model]) -> list[tuple[str, models.Field]]:
        companions: list[tuple[str, models.Field]] = [
            (self.hash_field_name, models.CharField(max_length=64, **self._companion_kwargs)),
            (self.version_field_name, models.CharField(max_length=100, **self._companion_kwargs)),
            (self.updated_at_field_name, models.DateTimeField(**self._companion_kwargs)),
        ]
        fields = self._keyword_source_fields(cls)
        if self.keyword_search and fields and valid_weights(fields, self.keyword_weights):
            # Generated by PostgreSQL from the source columns: nothing in Python keeps it current,
            # so queryset.update(), bulk_create() and raw SQL cannot leave it behind.
            expression = search_vector(fields, self.keyword_config, self.keyword_weights)
            generated = models.GeneratedField(
                expression=expression,
                output_field=SearchVectorField(),
                db_persist=True,
            )
            companions.append((self.tsvector_field_name, generated))
        return companions

    def _keyword_source_fields(self, cls: type[models.Model]) -> tuple[str, ...] | None:
        """The source's field names, or None for a method or function (which SQL cannot call).

        Runs while the class is being built, so a string names a field unless it is a method.
        """
        if isinstance(self.source, tuple):
            return self.source or None
        if isinstance(self.source, str) and not callable(getattr(cls, self.source, None)):
            return (self.source,)
        return None

    def _add_gin_index(self, cls: type[models.Model]) -> None:
        """A GIN index on ``<name>_tsv``, unless Meta.indexes already has one on that column."""
        column = self.tsvector_field_name
        if any(list(index.fields) == [column] for index in cls._meta.indexes):
            return
        index = GinIndex(fields=[column])
        index.set_name_with_model(cls)
        _add_index(cls, index)

    def _add_binary_index(self, cls: type[models.Model]) -> None:
        """The HNSW index over the binary codes (indexes.py), unless Meta.indexes names it."""
        name = binary_index_name(cls._meta.label_lower, self.name)
        if not any(index.name == name for index in cls._meta.indexes):
            _add_index(cls, binary_index(self.attname, name, self.dimensions))

    @property
    def binary_index_name(self) -> str:
        """The name of the binary-quantized index ``binary_index=True`` adds."""
        return binary_index_name(self.model._meta.label_lower, self.name)

    _companion_kwargs = {"null": True, "blank": True, "editable": False}

    @property
    def hash_field_name(self) -> str:
        return f"{self.name}_hash"

    @property
    def version_field_name(self) -> str:
        return f"{self.name}_version"

    @property
    def updated_at_field_name(self) -> str:
        return f"{self.name}_updated_at"

    @property
    def passage_config(self) -> PassageConfig | None:
        """How the text is split into passages; None without ``passages=``."""
        return passage_config(self.passages)

    @property
    def has_passages(self) -> bool:
        """True when the field indexes its text by passages (and has its passage table)."""
        return self.passage_model is not None

    @property
    def tsvector_field_name(self) -> str:
        """``<name>_tsv``: the generated tsvector column (with ``keyword_search=True``)."""
        return f"{self.name}_tsv"

    @property
    def has_keyword_search(self) -> bool:
        """True when the model has this field's generated tsvector column."""
        model = getattr(self, "model", None)
        if not self.keyword_search or model is None:
            return False
        try:
            model._meta.get_field(self.tsvector_field_name)
        except FieldDoesNotExist:
            return False
        return True

    # -- dimensions -------------------------------------------------------------------------

    def get_dimensions(self) -> int:
        """The explicit ``dimensions``, else the encoder's (read from its JSON config)."""
        if self.dimensions is not None:
            return self.dimensions
        try:
            return encoder_dimensions(self.encoder)
        except (LookupError, OSError, ValueError) as exc:
            raise ImproperlyConfigured(
                f"{self._label()}: cannot read the vector size of encoder {self.encoder!r} "
                f"({exc}). Install or configure the model (SBERT['ENCODERS']), or pass "
                "dimensions=... to the EmbeddingField."
            ) from exc

    @property
    def truncates(self) -> bool:
        """True when the field stores the encoder's vectors cut to fewer ``dimensions``
        (Matryoshka; check E023 says whether the encoder was trained for that size)."""
        if self.dimensions is None:
            return False
        try:
            return self.dimensions < encoder_dimensions(self.encoder)
        except (LookupError, OSError, ValueError, ImproperlyConfigured):
            return False

    def fit_vectors(self, vectors: Any) -> np.ndarray:
        """``vectors`` (one, or a 2-D array) at the column's size, as float32.

        Vectors of the field's size are returned as they are. On a field that truncates, wider
        vectors of its encoder (up to the encoder's full width) are cut to the field's size and
        re-normalized (``encoder.matryoshka.truncate``): every write and every query vector
        goes through here, so stored and query vectors are cut the same way. Any other size
        raises ``ValueError``.
        """
        array = np.asarray(vectors, dtype=np.float32)
        dimensions = self.get_dimensions()
        width = array.shape[-1] if array.ndim else 0
        if width == dimensions:
            return array
        if self.truncates and width in self._wider_sizes():
            return truncate(array, dimensions)
        accepted = str(dimensions)
        if self.truncates:
            wider = " or ".join(map(str, sorted(self._wider_sizes(), reverse=True)))
            accepted += f" (or {wider}, cut to {dimensions})"
        raise ValueError(
            f"{self._label()} holds {accepted}-dimensional vectors, not {width}-dimensional "
            f"ones; encode them with encoder {self.encoder!r}."
        )

    def _wider_sizes(self) -> set[int]:
        """The encoder's sizes a truncating field cuts from: its full width and the wider
        Matryoshka sizes (a vector of another field of the same encoder)."""
        dimensions = self.get_dimensions()
        trained = {d for d in matryoshka_dims(self.encoder) if d > dimensions}
        return {encoder_dimensions(self.encoder), *trained}

    @property
    def vector_type(self) -> str:
        """The pgvector type of the column: ``vector`` (float32) or ``halfvec`` (float16)."""
        return PRECISIONS.get(self.precision, "vector")

    def db_type(self, connection: Any) -> str:
        return f"{self.vector_type}({self.get_dimensions()})"

    # -- source text ------------------------------------------------------------------------

    @property
    def source_fields(self) -> tuple[str, ...] | None:
        """The model field names the text is built from; None for a callable or method source."""
        if isinstance(self.source, tuple):
            return self.source
        if isinstance(self.source, str) and self._is_field_name(self.source):
            return (self.source,)
        return None

    def _is_field_name(self, name: str) -> bool:
        try:
            self.model._meta.get_field(name)
        except (FieldDoesNotExist, AttributeError):
            return False
        return True

    def get_source_text(self, instance: models.Model) -> str:
        """The text this field embeds for ``instance``."""
        fields = self.source_fields
        if fields is not None:
            return "\n".join(_text(getattr(instance, name)) for name in fields)
        if callable(self.source):
            return _text(self.source(instance))
        if isinstance(self.source, str):
            return _text(getattr(instance, self.source)())
        raise ImproperlyConfigured(f"{self._label()} has no source; see check django_sbert.E006.")

    # ``field.text_hash(text)``: the module function, reachable from a field.
    text_hash = staticmethod(text_hash)

    def sql_text_hash_expression(self) -> Func | None:
        """A database expression equal to ``text_hash(get_source_text(row))`` for every row.

        Available when the source is a tuple of CharField/TextField names (their Python ``str``
        and PostgreSQL ``::text`` agree); None otherwise, and the hash is computed in Python.
        """
        fields = self.source_fields
        if fields is None:
            return None
        parts = []
        for name in fields:
            field = self.model._meta.get_field(name)
            if not isinstance(field, TEXT_FIELD_TYPES):
                return None
            parts.append(Coalesce(Cast(name, TextField()), Value("")))
        return Sha256Hex(ConcatWS(Value("\n"), *parts))

    # -- values -----------------------------------------------------------------------------

    def to_python(self, value: Any) -> list[float] | None:
        """Accept lists, tuples, numpy arrays, pgvector Vectors and ``[1,2,3]`` text."""
        if value is None or isinstance(value, list):
            return value
        if isinstance(value, str):
            return Vector._from_db(value) if value.strip() else None
        return vector_list(value)

    def formfield(self, **kwargs: Any) -> forms.Field:
        return super().formfield(**{"form_class": EmbeddingFormField, **kwargs})

    def _label(self) -> str:
        model = getattr(self, "model", None)
        return f"{model._meta.label}.{self.name}" if model is not None else "EmbeddingField"


def _add_index(cls: type[models.Model], index: models.Index) -> None:
    """Append ``index`` to the model's indexes, where migrations see it too."""
    # A new list: Meta.indexes may be shared with other models through Meta inheritance.
    cls._meta.indexes = [*cls._meta.indexes, index]
    # Migrations read a model's indexes only when its Meta declared some (original_attrs).
    cls._meta.original_attrs["indexes"] = cls._meta.indexes


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def embedding_fields(model: type[models.Model]) -> list[EmbeddingField]:
    """The EmbeddingFields of ``model`` (inherited ones included), in declaration order."""
    return [f for f in model._meta.concrete_fields if isinstance(f, EmbeddingField)]


def all_embedding_fields() -> list[tuple[type[models.Model], EmbeddingField]]:
    """(model, field) for every EmbeddingField of every installed, managed model.

    Each field is listed once, with the model that declares it (a multi-table child does not
    repeat its parent's field), so a sweep over this list visits every table once.
    """
    return [
        (model, field)
        for model in apps.get_models()
        if model._meta.managed and not model._meta.proxy
        for field in model._meta.local_concrete_fields
        if isinstance(field, EmbeddingField)
    ]
