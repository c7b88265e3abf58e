"""``SemanticSearchFilter``: ``?semantic=...`` ranking for any DRF list view.

::

    class ArticleViewSet(viewsets.ModelViewSet):
        queryset = Article.objects.all()
        serializer_class = ArticleSerializer
        filter_backends = [DjangoFilterBackend, OrderingFilter, SemanticSearchFilter]
        semantic_search_field = "embedding"        # optional: which EmbeddingField
        semantic_min_similarity = 0.3              # optional: drop weak matches
        semantic_search_mode = "hybrid"            # optional: vector (default), hybrid, keyword

``GET /articles/?semantic=rising+interest+rates&category=economy&page=2`` filters with the other
backends, then orders the remaining rows by cosine similarity to the text (nearest first,
annotated ``similarity``); rows without an embedding are left out. The view's paginator pages
through the ranking; an unpaginated view gets the top ``semantic_search_k`` rows (default
SBERT["SEARCH"]["K"]). Put it last in ``filter_backends``: a backend after it that orders
(OrderingFilter with a default ordering, say) would replace the ranking. With
``semantic_search_mode = "hybrid"`` or ``"keyword"`` the rows are ranked by
``hybrid_search()`` (annotated ``score``) or ``keyword_search()`` (``keyword_score``) instead.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.request import Request
from rest_framework.views import APIView

from .registry import as_semantic
from .settings import api_settings


class SemanticSearchFilter(BaseFilterBackend):
    """Order a view's queryset by similarity to ``?semantic=`` (DRF SearchFilter's twin)."""

    search_param = "semantic"
    search_description = (
        "Order results by semantic similarity to this text (nearest first); rows without an "
        "embedding are left out."
    )

    def get_search_text(self, request: Request, view: APIView) -> str | None:
        """The stripped ``?semantic=`` text, None when absent or blank; 400 when too long."""
        param = getattr(view, "semantic_search_param", self.search_param)
        text = request.query_params.get(param, "").strip()
        if not text:
            return None
        limit = int(api_settings.MAX_QUERY_LENGTH)
        if len(text) > limit:
            raise ValidationError(
                {
                    param: f"Longer than {limit} characters (SBERT['API']['MAX_QUERY_LENGTH']); "
                    "shorten the search text."
                }
            )
        if "\x00" in text:
            raise ValidationError({param: "Null characters are not allowed."})
        return text

    def filter_queryset(
        self, request: Request, queryset: models.QuerySet, view: APIView
    ) -> models.QuerySet:
        text = self.get_search_text(request, view)
        if text is None:
            return queryset
        mode = getattr(view, "semantic_search_mode", "vector")
        k = getattr(view, "semantic_search_k", None)
        field = getattr(view, "semantic_search_field", None)
        semantic = as_semantic(queryset)
        if mode == "vector":
            return semantic.similar_to(
                text,
                k=k,
                min_similarity=getattr(view, "semantic_min_similarity", None),
                field=field,
            )
        if mode == "hybrid":
            return semantic.hybrid_search(text, k=k, field=field)
        if mode == "keyword":
            return semantic.keyword_search(text, k=k, field=field)
        raise ImproperlyConfigured(
            f"{type(view).__name__}.semantic_search_mode is {mode!r}; use 'vector', 'hybrid' "
            "or 'keyword'."
        )

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        param = getattr(view, "semantic_search_param", self.search_param)
        return [
            {
                "name": param,
                "required": False,
                "in": "query",
                "description": self.search_description,
                "schema": {"type": "string", "maxLength": int(api_settings.MAX_QUERY_LENGTH)},
            }
        ]
