"""Search-as-you-type for sites without Django REST framework: a JSON view.

::

    # urls.py
    from django_sbert.views import SuggestView

    path("suggest/", SuggestView.as_view(model=Article), name="suggest")
    path("suggest/", SuggestView.as_view(queryset=Article.objects.filter(published=True)))

``GET suggest/?q=central+ban&k=5`` answers::

    {"results": [{"id": 12, "label": "Central banks raise rates", "url": "/articles/12/"}]}

with the rows of ``query.suggest()``: ``id``, ``label``, ``url`` and the model fields listed
in ``fields``, nothing else; ``django_sbert/suggest.js`` shows them under a search box.
Visibility is the queryset's (override ``get_queryset()`` for per-user rows); rate limits are
the site's own (the REST API's ``suggest/`` has a throttle).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured
from django.db import models
from django.http import HttpRequest, JsonResponse
from django.views import View

from ..conf import sbert_settings
from ..exceptions import ServiceUnavailable
from ..fields import EmbeddingField
from ..query import as_semantic, suggest
from .errors import client_message, new_request_id

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


class SuggestView(View):
    """JSON suggestions for ``?q=`` (the text typed so far) and an optional ``?k=``."""

    http_method_names = ["get", "head", "options"]
    model: type[models.Model] | None = None
    queryset: models.QuerySet | models.Manager | None = None
    field: str | None = None  # the EmbeddingField, when the model has several
    fields: Sequence[str] = ()  # model fields added to each suggestion, besides id/label/url
    k: int | None = None  # default: SBERT["SEARCH"]["SUGGEST"]["K"]
    max_k = 20
    max_length = 200  # characters of ?q=: what a search box holds

    def get_queryset(self) -> models.QuerySet:
        """The rows that may be suggested: ``queryset``, else every row of ``model``."""
        if self.queryset is not None:
            return self.queryset.all()  # a fresh clone: never a cached result
        if self.model is None:
            raise ImproperlyConfigured(
                f"{type(self).__name__} needs a model or a queryset, e.g. "
                "SuggestView.as_view(model=Article), or override get_queryset()."
            )
        return self.model._default_manager.all()

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        text = request.GET.get("q", "")
        if len(text) > self.max_length:
            return _error(f"q is longer than {self.max_length} characters.")
        if "\x00" in text:
            return _error("q contains a NUL character.")
        k = self.k or int(sbert_settings.SEARCH["SUGGEST"]["K"])
        given = request.GET.get("k", "")
        if given:
            # ASCII digits only: "²".isdigit() is True, and int("²") raises.
            if not (given.isascii() and given.isdigit() and len(given) <= 4) or not (
                1 <= int(given) <= self.max_k
            ):
                return _error(f"k must be a whole number from 1 to {self.max_k}.")
            k = int(given)
        queryset = as_semantic(self.get_queryset())
        self.check_fields(queryset.model)
        try:
            found = suggest(queryset, text, k, self.field)
        except ServiceUnavailable as exc:
            request_id = new_request_id()
            logger.warning("503 for %s (request %s): %r", request.path, request_id, exc)
            response = JsonResponse(
                {"error": client_message(exc), "request_id": request_id}, status=503
            )
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        results = []
        for item in found:
            row = {"id": item.pk, "label": item.label, "url": item.url}
            row.update((name, _plain(getattr(item.object, name))) for name in self.fields)
            results.append(row)
        return JsonResponse({"results": results})

    def check_fields(self, model: type[models.Model]) -> None:
        """``fields`` must be concrete fields of the model, and no EmbeddingField."""
        for name in self.fields:
            try:
                found = model._meta.get_field(name)
            except FieldDoesNotExist:
                found = None
            if found is None or isinstance(found, EmbeddingField) or not found.concrete:
                raise ImproperlyConfigured(
                    f"{type(self).__name__}.fields names {name!r}, which is not a field "
                    f"{model._meta.label} can show in a suggestion; list its text, date or "
                    "number fields (vectors are not for display)."
                )


def _error(message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=400)


def _plain(value: Any) -> Any:
    """A field value JSON can hold (dates and decimals as text; a related row as its pk)."""
    if isinstance(value, models.Model):
        return value.pk
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
