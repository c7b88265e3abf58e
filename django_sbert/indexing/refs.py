"""``FieldRef``: one ``EmbeddingField`` on one concrete model, the unit every indexing step
works on, and how tasks and commands name one (``"app_label.Model"``, ``"field"``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.db import models, router

from ..conf import encoder_config
from ..fields import EmbeddingField, all_embedding_fields, embedding_fields
from ..serving import encoder_version

Pk = Any  # a primary key value: int, str, UUID...


@dataclass(frozen=True)
class FieldRef:
    """One ``EmbeddingField`` on one concrete model: what every indexing function works on."""

    model: type[models.Model]
    field: EmbeddingField

    @property
    def label(self) -> str:
        """``app_label.ModelName``, the form Celery task arguments and commands use."""
        return self.model._meta.label

    @property
    def name(self) -> str:
        return self.field.name

    def __str__(self) -> str:
        return f"{self.label}.{self.name}"

    @property
    def hash_attname(self) -> str:
        return self.field.hash_field_name

    @property
    def version_attname(self) -> str:
        return self.field.version_field_name

    @property
    def updated_at_attname(self) -> str:
        return self.field.updated_at_field_name

    @property
    def encoder_name(self) -> str:
        return self.field.encoder

    @property
    def db_alias(self) -> str:
        return router.db_for_write(self.model)

    @property
    def manager(self) -> models.Manager:
        # The base manager: a custom default manager may hide rows that still need vectors.
        return self.model._base_manager.db_manager(self.db_alias)

    def version(self) -> str:
        """The version string of the encoder this field uses now."""
        return encoder_version(self.encoder_name)


def content_type_id(ref: FieldRef) -> int:
    """The id of the model's (concrete) content type: side tables key their rows by it."""
    return (
        ContentType.objects.db_manager(ref.db_alias)
        .get_for_model(ref.model, for_concrete_model=True)
        .pk
    )


def field_refs(model: type[models.Model] | None = None) -> list[FieldRef]:
    """Every embedding field of ``model``, or of every installed model, each table once.

    A field inherited through multi-table inheritance lives in (and is indexed on) the parent
    model's table, so its ref names the parent.
    """
    if model is None:
        return [FieldRef(m, f) for m, f in all_embedding_fields()]
    refs: list[FieldRef] = []
    for f in embedding_fields(model):
        owner = model if f.model._meta.concrete_model is model._meta.concrete_model else f.model
        owner = owner._meta.concrete_model  # a proxy shares its concrete model's table
        if FieldRef(owner, f) not in refs:
            refs.append(FieldRef(owner, f))
    return refs


def get_ref(model_label: str, field_name: str) -> FieldRef:
    """Resolve the ``("app_label.Model", "field")`` pair that tasks receive."""
    try:
        model = apps.get_model(model_label)
    except (LookupError, ValueError) as exc:
        raise LookupError(
            f"No installed model {model_label!r} (expected 'app_label.Model')."
        ) from exc
    for ref in field_refs(model):
        if ref.name == field_name:
            return ref
    names = ", ".join(ref.name for ref in field_refs(model)) or "none"
    raise LookupError(
        f"{model_label}.{field_name} is not an EmbeddingField; {model_label} has: {names}."
    )


def resolve_targets(targets: Sequence[str] = ()) -> list[FieldRef]:
    """Turn ``["app.Model", "app.Model.field"]`` (or nothing: every field) into field refs."""
    if not targets:
        return field_refs()
    refs: list[FieldRef] = []
    for target in targets:
        parts = target.split(".")
        if len(parts) not in (2, 3):
            raise LookupError(f"{target!r}: expected app_label.Model or app_label.Model.field.")
        label = ".".join(parts[:2])
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError) as exc:
            raise LookupError(f"{target!r}: no installed model {label!r}.") from exc
        found = field_refs(model)
        if len(parts) == 3:
            found = [get_ref(label, parts[2])]
        elif not found:
            raise LookupError(f"{target!r}: {label} has no EmbeddingField.")
        refs.extend(ref for ref in found if ref not in refs)
    return refs


def check_configured(ref: FieldRef) -> None:
    """Fail early, with a useful message, when the field's encoder is not configured."""
    try:
        encoder_config(ref.encoder_name)
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"{ref}: {exc}") from exc
