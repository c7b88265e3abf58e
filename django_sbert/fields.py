"""``EmbeddingField``: a pgvector ``VectorField`` that knows which text it embeds.

::

    class Article(models.Model):
        title = models.CharField(max_length=300)
        body = models.TextField()
        embedding = EmbeddingField(source=("title", "body"))   # encoder="default"

``source`` is one of

* a tuple of field names: their values joined with a newline (``None`` becomes ``""``);
* the name of a method on the model, called with no arguments;
* a module-level function taking the instance (it is written into migrations, like
  ``upload_to``, so it cannot be a lambda).

Beside the vector the field adds three bookkeeping columns (they appear in migrations, the way
ImageField's ``width_field`` does when you declare it): ``<name>_hash`` (sha256 of the text that
was encoded), ``<name>_version`` (the encoder version that encoded it) and ``<name>_updated_at``.
A row is stale when its vector is NULL, its hash differs from the hash of its current text, or
its version differs from the encoder's current version; see docs/search.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
from django import forms
from django.apps import apps
from django.core import checks
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models
from django.db.models import Func, TextField, Value
from django.db.models.functions import Cast, Coalesce
from pgvector import Vector
from pgvector.django import VectorField

Source = tuple[str, ...] | str | Callable[[models.Model], str]

# Fields whose Python str() and PostgreSQL ::text agree, so the SQL hash matches text_hash().
TEXT_FIELD_TYPES = (models.CharField, models.TextField)


def text_hash(text: str) -> str:
    """sha256 hex digest of ``text`` encoded as UTF-8: what ``<field>_hash`` stores."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class Sha256Hex(Func):
    """``encode(sha256(convert_to(text, 'UTF8')), 'hex')``: PostgreSQL's twin of text_hash()."""

    template = "ENCODE(SHA256(CONVERT_TO(%(expressions)s, 'UTF8')), 'hex')"
    output_field = TextField()


class ConcatWS(Func):
    """``concat_ws(separator, a, b, ...)``; the separator is passed as a query parameter."""

    function = "CONCAT_WS"
    output_field = TextField()


class EmbeddingFormField(forms.CharField):
    """Shows a vector as ``[0.1,0.2,...]`` and parses it back (numpy arrays included)."""

    def prepare_value(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        # float32 values written in their shortest form: 0.1, not 0.10000000149011612.
        return "[" + ",".join(str(v) for v in np.asarray(_as_list(value), dtype=np.float32)) + "]"

    def to_python(self, value: Any) -> list[float] | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, str):
            try:
                return Vector._from_db(value.strip())
            except ValueError as exc:
                raise forms.ValidationError(
                    "Enter a vector as comma-separated numbers in brackets, e.g. [0.1,0.2].",
                    code="invalid",
                ) from exc
        return _as_list(value)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            new = self.to_python(data)
            old = self.to_python(initial)
        except forms.ValidationError:
            return True
        if new is None or old is None:
            return (new is None) != (old is None)
        return not np.array_equal(
            np.asarray(new, dtype=np.float32), np.asarray(old, dtype=np.float32)
        )


def _as_list(value: Any) -> list[float]:
    if isinstance(value, Vector):
        return value.to_list()
    if isinstance(value, np.ndarray):
        return [float(v) for v in value.tolist()]
    return [float(v) for v in value]


class EmbeddingField(VectorField):
    """A sentence embedding of other fields of the row, kept up to date by django-sbert."""

    description = "Sentence embedding"
    empty_values = _EmptyValues()  # type: ignore[assignment]
    _defaults = {"null": True, "blank": True, "editable": False}

    def __init__(
        self,
        source: Source | None = None,
        encoder: str = "default",
        dimensions: int | None = None,
        **kwargs: Any,
    ) -> None:
        for key, value in self._defaults.items():
            kwargs.setdefault(key, value)
        if isinstance(source, list):
            source = tuple(source)
        self.source = source
        self.encoder = encoder
        super().__init__(dimensions=dimensions, **kwargs)

    # -- migrations -------------------------------------------------------------------------

    def deconstruct(self) -> tuple[Any, Any, Any, Any]:
        name, path, args, kwargs = super().deconstruct()
        for key, default in self._defaults.items():
            kwargs.pop(key, None)
            if getattr(self, key) != default:
                kwargs[key] = getattr(self, key)
        if self.source is not None:
            kwargs["source"] = self.source
        if self.encoder != "default":
            kwargs["encoder"] = self.encoder
        return name, path, args, kwargs

    def contribute_to_class(self, cls: type[models.Model], name: str, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, **kwargs)
        # Abstract models: each concrete child gets its own copy of this field, which adds the
        # companions there. Historical models ("__fake__") take them from the migration state.
        if cls._meta.abstract or cls.__module__ == "__fake__":
            return
        existing = {f.name for f in cls._meta.local_fields}
        for companion_name, companion in self._companions():
            if companion_name not in existing:
                cls.add_to_class(companion_name, companion)

    def _companions(self) -> list[tuple[str, models.Field]]:
        return [
            (self.hash_field_name, models.CharField(max_length=64, **self._companion_kwargs)),
            (self.version_field_name, models.CharField(max_length=100, **self._companion_kwargs)),
            (self.updated_at_field_name, models.DateTimeField(**self._companion_kwargs)),
        ]

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

    # -- dimensions -------------------------------------------------------------------------

    def get_dimensions(self) -> int:
        """The explicit ``dimensions``, else the encoder's (read from its JSON config)."""
        if self.dimensions is not None:
            return self.dimensions
        from .encoders import encoder_dimensions

        try:
            return encoder_dimensions(self.encoder)
        except (LookupError, OSError, ValueError) as exc:
            raise ImproperlyConfigured(
                f"{self._label()}: cannot read the vector size of encoder {self.encoder!r} "
                f"({exc}). Install or configure the model (SBERT['ENCODERS']), or pass "
                "dimensions=... to the EmbeddingField."
            ) from exc

    def db_type(self, connection: Any) -> str:
        return f"vector({self.get_dimensions()})"

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

    @staticmethod
    def text_hash(text: str) -> str:
        """sha256 hex of ``text`` (UTF-8): what the ``<name>_hash`` column stores."""
        return text_hash(text)

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
        return _as_list(value)

    def formfield(self, **kwargs: Any) -> forms.Field:
        return super().formfield(**{"form_class": EmbeddingFormField, **kwargs})

    # -- checks -----------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        from .checks import check_embedding_field

        return [*super().check(**kwargs), *self._check_source(), *check_embedding_field(self)]

    def _check_source(self) -> list[checks.CheckMessage]:
        source = self.source
        problem = None
        if source is None:
            problem = "has no source"
        elif isinstance(source, tuple):
            missing = [n for n in source if not isinstance(n, str) or not self._is_field_name(n)]
            if not source:
                problem = "has an empty source"
            elif missing:
                problem = f"names unknown fields in source: {', '.join(map(str, missing))}"
        elif isinstance(source, str):
            if not self._is_field_name(source) and not callable(getattr(self.model, source, None)):
                problem = f"source {source!r} is neither a field nor a method of the model"
        elif not callable(source):
            problem = f"source must be field names, a method name or a function, not {source!r}"
        if problem is None:
            return []
        return [
            checks.Error(
                f"EmbeddingField {problem}.",
                hint="Pass source=('title', 'body'), the name of a model method returning the "
                "text, or a module-level function taking the instance.",
                obj=self,
                id="django_sbert.E006",
            )
        ]

    def _label(self) -> str:
        model = getattr(self, "model", None)
        return f"{model._meta.label}.{self.name}" if model is not None else "EmbeddingField"


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
