"""``SemanticSearchFilter``: ``?semantic=...`` ranking for any DRF list view.

::

    class ArticleViewSet(viewsets.ModelViewSet):
        queryset = Article.objects.all()
        serializer_class = ArticleSerializer
        filter_backends = [DjangoFilterBackend, OrderingFilter, SemanticSearchFilter]
        semantic_search_field = "embedding"        # optional: which EmbeddingField
        semantic_min_similarity = 0.3              # optional: drop weak matches
        semantic_search_mode = "hybrid"            # optional: vector (default), hybrid, keyword

The view's paginator pages through the top ``SBERT["API"]["MAX_K"]`` rows of the ranking, so
no request ranks (or counts) the whole table. Put it last in ``filter_backends``: a backend
after it that orders would replace the ranking (docs/api.md, "``SemanticSearchFilter``").
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import models
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.pagination import LimitOffsetPagination, PageNumberPagination
from rest_framework.request import Request
from rest_framework.views import APIView

from ..conf import sbert_settings
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
        limit = int(sbert_settings.SEARCH["MAX_QUERY_LENGTH"])
        if len(text) > limit:
            raise ValidationError(
                {
                    param: f"Longer than {limit} characters (SBERT['SEARCH']['MAX_QUERY_LENGTH']); "
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
            ranked = semantic.similar_to(
                text,
                k=k,
                min_similarity=getattr(view, "semantic_min_similarity", None),
                field=field,
            )
        elif mode == "hybrid":
            ranked = semantic.hybrid_search(text, k=k, field=field)
        elif mode == "keyword":
            ranked = semantic.keyword_search(text, k=k, field=field)
        else:
            raise ImproperlyConfigured(
                f"{type(view).__name__}.semantic_search_mode is {mode!r}; use 'vector', "
                "'hybrid' or 'keyword'."
            )
        return self.bounded(request, view, ranked)

    def bounded(self, request: Request, view: APIView, ranked: models.QuerySet) -> models.QuerySet:
        """The ranking cut to its top ``max_depth()`` rows for a paginated list.

        A paginator slices the queryset per page, which takes the place of ``k``: without a
        cut, ``?page=100000`` would make the index scan walk 100,000 pages' worth of rows and
        the page count compare the text with every row (every passage of every row). Cut, the
        count is at most the depth and a page past it is 404 (``Invalid page.``); one whose
        first row lies past the depth is answered so here, with the reason. A detail route
        (the URL names a row) is left alone: it filters the queryset after this backend.
        """
        paginator = getattr(view, "paginator", None)
        lookup = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", None)
        if paginator is None or (lookup and lookup in getattr(view, "kwargs", {})):
            return ranked
        depth = self.max_depth()
        first = _first_row(paginator, request, view)
        if first is not None and first >= depth:
            raise NotFound(
                f"Invalid page: results of ?{self._param(view)}= end at row {depth} "
                "(SBERT['API']['MAX_K']); search more precisely instead of paging on."
            )
        return ranked[:depth]

    @staticmethod
    def max_depth() -> int:
        """Rows a client can page through: SBERT["API"]["MAX_K"]."""
        return int(api_settings.MAX_K)

    def _param(self, view: APIView) -> str:
        return getattr(view, "semantic_search_param", self.search_param)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        param = getattr(view, "semantic_search_param", self.search_param)
        return [
            {
                "name": param,
                "required": False,
                "in": "query",
                "description": self.search_description,
                "schema": {
                    "type": "string",
                    "maxLength": int(sbert_settings.SEARCH["MAX_QUERY_LENGTH"]),
                },
            }
        ]


def _first_row(paginator: Any, request: Request, view: APIView) -> int | None:
    """Index of the first row the request's page asks for, for DRF's page-number and
    limit-offset paginators (None for others, or a malformed page: the paginator answers)."""
    try:
        if isinstance(paginator, PageNumberPagination):
            size = paginator.get_page_size(request)
            number = request.query_params.get(paginator.page_query_param) or 1
            if size is None or str(number) in paginator.last_page_strings:
                return None
            return (int(number) - 1) * int(size)
        if isinstance(paginator, LimitOffsetPagination):
            return int(request.query_params.get(paginator.offset_query_param) or 0)
    except (TypeError, ValueError):
        return None
    return None
