"""Which models the REST API may search, and how each one is shown.

Nothing is searchable over HTTP until it is registered, and only the fields listed are returned:
a search endpoint that serialized whole instances would hand out whatever the model holds
(password hashes, in one peer project). Register in ``AppConfig.ready()``::

    from django_sbert import api

    class BlogConfig(AppConfig):
        def ready(self):
            from .models import Article
            api.register(
                Article,
                fields=["id", "title", "published"],
                queryset=lambda request: Article.objects.filter(published=True),
            )
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.settings import api_settings as drf_settings

from ..exceptions import AlreadyRegistered, NotRegistered
from ..fields import EmbeddingField, embedding_fields
from ..query import SemanticQuerySet, as_semantic
from .settings import api_settings

QuerySetSource = models.QuerySet | models.Manager | Callable[[Request], models.QuerySet] | None


@dataclass(frozen=True)
class SearchEntry:
    """One registered model: what is searched, who may search it, how results are shown."""

    model: type[models.Model]
    serializer_class: type[serializers.BaseSerializer]
    queryset: QuerySetSource = None
    permission_classes: tuple[type[BasePermission], ...] | None = None
    # Results of a field with passages= carry the best passage's text (register(passages=)).
    show_passages: bool = False

    @property
    def label(self) -> str:
        """``app_label.modelname`` in lower case: the ``model`` parameter of search/."""
        return self.model._meta.label_lower

    @property
    def embedding_fields(self) -> list[EmbeddingField]:
        return embedding_fields(self.model)

    def get_queryset(self, request: Request) -> SemanticQuerySet:
        """The rows ``request`` may search: the registered queryset (or callable), else all."""
        source = self.queryset
        if source is None:
            queryset = self.model._default_manager.all()
        elif isinstance(source, models.QuerySet | models.Manager):
            queryset = source.all()  # a fresh clone: never reuse a cached result
        else:
            queryset = source(request)
            if isinstance(queryset, models.Manager):
                queryset = queryset.all()
            if not isinstance(queryset, models.QuerySet):
                raise ImproperlyConfigured(
                    f"The queryset callable registered for {self.model._meta.label} returned "
                    f"{type(queryset).__name__}; it must return a QuerySet of "
                    f"{self.model._meta.label}, e.g. lambda request: "
                    f"{self.model.__name__}.objects.filter(...)."
                )
        if queryset.model is not self.model:
            raise ImproperlyConfigured(
                f"The queryset registered for {self.model._meta.label} holds "
                f"{queryset.model._meta.label} rows; pass a queryset of the registered model."
            )
        return as_semantic(queryset)

    def get_permissions(self) -> list[BasePermission]:
        """Per-model classes, else SBERT["API"]["PERMISSION_CLASSES"]["search"], else
        DRF's."""
        classes = self.permission_classes
        if classes is None:
            classes = api_settings.PERMISSION_CLASSES["search"]
        if classes is None:
            classes = drf_settings.DEFAULT_PERMISSION_CLASSES
        return [permission() for permission in classes]


class SearchRegistry:
    """Registered models by label (``app_label.modelname``)."""

    def __init__(self) -> None:
        self._entries: dict[str, SearchEntry] = {}

    def register(
        self,
        model: type[models.Model],
        fields: Sequence[str] | None = None,
        queryset: QuerySetSource = None,
        permission_classes: Sequence[type[BasePermission]] | None = None,
        serializer_class: type[serializers.BaseSerializer] | None = None,
        passages: bool | None = None,
    ) -> SearchEntry:
        """Make ``model`` searchable through search/ and similar/; see the module docstring.

        ``fields`` lists what each result's ``object`` holds (a read-only ModelSerializer is
        built from it); ``serializer_class`` replaces it when you need more control. One of the
        two is required. ``queryset`` is a QuerySet, a Manager, or a callable taking the request
        and returning a QuerySet (per-user visibility); default: every row.
        ``permission_classes`` default to SBERT["API"]["PERMISSION_CLASSES"]["search"].
        ``passages``: whether results of a field with ``passages=`` show the best passage (its
        text is a piece of the field's source text). None: only when every source field is
        among ``fields``, so a passage never shows text the listed fields do not.
        """
        if not (isinstance(model, type) and issubclass(model, models.Model)):
            raise TypeError(f"register() takes a model class, got {model!r}.")
        label = model._meta.label
        if model._meta.abstract:
            raise ImproperlyConfigured(f"{label} is abstract; register a concrete model.")
        if model._meta.label_lower in self._entries:
            raise AlreadyRegistered(
                f"{label} is already registered for the sbert API; call "
                f"django_sbert.api.unregister({model.__name__}) first to change its options."
            )
        if not embedding_fields(model):
            raise ImproperlyConfigured(
                f"{label} has no EmbeddingField, so there is nothing to search; add one, e.g. "
                "embedding = EmbeddingField(source=('title', 'body'))."
            )
        if serializer_class is not None and fields is not None:
            raise ImproperlyConfigured(
                f"register({model.__name__}) got both fields and serializer_class; pass one: "
                "fields builds a read-only ModelSerializer, serializer_class replaces it."
            )
        if serializer_class is None:
            if fields is None:
                raise ImproperlyConfigured(
                    f"register({model.__name__}) needs fields=[...] (the fields each result "
                    "shows) or serializer_class=...; all fields are never exposed by default, "
                    "so nothing private leaks through search."
                )
            serializer_class = _model_serializer(model, fields)
        elif not (
            isinstance(serializer_class, type)
            and issubclass(serializer_class, serializers.BaseSerializer)
        ):
            raise ImproperlyConfigured(
                f"serializer_class for {label} must be a DRF Serializer class, "
                f"got {serializer_class!r}."
            )
        if permission_classes is not None:
            if isinstance(permission_classes, str | type) or not all(
                isinstance(p, type) for p in permission_classes
            ):
                raise ImproperlyConfigured(
                    f"permission_classes for {label} must be a list of permission classes, "
                    "e.g. [IsAuthenticated]."
                )
            permission_classes = tuple(permission_classes)
        if not (
            queryset is None
            or callable(queryset)
            or isinstance(queryset, models.QuerySet | models.Manager)
        ):
            raise ImproperlyConfigured(
                f"queryset for {label} must be a QuerySet, a Manager or a callable taking the "
                f"request, got {type(queryset).__name__}."
            )
        if passages is None:
            passages = fields is not None and _sources_listed(model, fields)
        entry = SearchEntry(model, serializer_class, queryset, permission_classes, passages)
        self._entries[model._meta.label_lower] = entry
        return entry

    def unregister(self, model: type[models.Model]) -> None:
        label = model._meta.label_lower
        if label not in self._entries:
            raise NotRegistered(f"{model._meta.label} is not registered for the sbert API.")
        del self._entries[label]

    def get(self, label: str) -> SearchEntry:
        """The entry of ``app_label.modelname`` (any case); NotRegistered if none."""
        entry = self._entries.get(label.lower()) if isinstance(label, str) else None
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise NotRegistered(f"Unknown model {label!r}. Searchable models: {known}.", label)
        return entry

    def is_registered(self, model: type[models.Model]) -> bool:
        return model._meta.label_lower in self._entries

    @property
    def labels(self) -> list[str]:
        return sorted(self._entries)

    def visible_labels(self, request: Request | None) -> list[str]:
        """The labels ``request``'s client may learn: those of the models it may search (their
        permission classes pass), all of them for staff and without a request (a schema
        generated offline, by the developer).

        The public schema/ lists these, so it does not hand out what the answers to an unknown
        model withhold."""
        user = getattr(request, "user", None)
        if request is None or (user is not None and user.is_staff):
            return self.labels
        return [
            label for label, entry in sorted(self._entries.items()) if _may_search(request, entry)
        ]

    def clear(self) -> None:
        self._entries.clear()


class _EntryView:
    """What permission classes read from a view, for one entry outside a request to it
    (DjangoModelPermissions takes the model from ``get_queryset()``)."""

    def __init__(self, entry: SearchEntry) -> None:
        self.entry = entry
        self.kwargs: dict[str, object] = {}

    def get_queryset(self) -> models.QuerySet:
        return self.entry.model._default_manager.none()


def _may_search(request: Request, entry: SearchEntry) -> bool:
    """Whether every permission class of ``entry`` lets ``request``'s client search it."""
    view = _EntryView(entry)
    try:
        return all(p.has_permission(request, view) for p in entry.get_permissions())
    except Exception:  # a class that needs more of a view than this: not shown
        return False


def _sources_listed(model: type[models.Model], fields: Sequence[str]) -> bool:
    """Whether every field with passages= builds its text from fields among ``fields``."""
    for field in embedding_fields(model):
        if field.passage_config is None:
            continue
        sources = field.source_fields
        if sources is None or not set(sources) <= set(fields):
            return False
    return True


def _model_serializer(
    model: type[models.Model], fields: Sequence[str]
) -> type[serializers.ModelSerializer]:
    """A read-only ModelSerializer of exactly ``fields``, checked now rather than per request."""
    label = model._meta.label
    if isinstance(fields, str) or not all(isinstance(name, str) for name in fields):
        raise ImproperlyConfigured(
            f"fields for {label} must be a list of field names, e.g. ['id', 'title'], "
            f"got {fields!r}."
        )
    if not fields:
        raise ImproperlyConfigured(f"fields for {label} is empty; list at least one field.")
    vectors = {f.name for f in embedding_fields(model)} & set(fields)
    if vectors:
        raise ImproperlyConfigured(
            f"fields for {label} include the EmbeddingField(s) {sorted(vectors)}: vectors are "
            "large and not meant for display. Remove them, or use serializer_class if you "
            "really want them."
        )
    meta = type("Meta", (), {"model": model, "fields": tuple(fields), "read_only_fields": fields})
    serializer = type(
        f"{model.__name__}SearchObjectSerializer",
        (serializers.ModelSerializer,),
        {
            "Meta": meta,
            "__module__": __name__,
            "__doc__": f"The registered fields of {label}.",
        },
    )
    try:
        serializer().fields  # noqa: B018 - builds the fields: unknown names fail here
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(f"Cannot register {label} for the sbert API: {exc}") from exc
    return serializer


registry = SearchRegistry()
register = registry.register
unregister = registry.unregister
