"""The search pages the view tests request (tests/views/test_search_view.py), also served by
uvicorn through ``tests.views.asgi_settings``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from django_sbert.query import SemanticQuerySet
from django_sbert.views import AsyncSearchView, SearchView
from tests.testapp.models import Article, Report


class ArticleSearch(SearchView):
    model = Article


class CategorySearch(ArticleSearch):
    """A filter of the site's own: ``?category=``."""

    def filter_queryset(self, queryset: SemanticQuerySet) -> SemanticQuerySet:
        category = self.request.GET.get("category")
        return queryset.filter(category=category) if category else queryset


class ReportSearch(SearchView):
    """Passages: results carry a snippet."""

    model = Report
    modes = ("vector", "hybrid")


class AsyncArticleSearch(AsyncSearchView):
    model = Article


async def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


def suggest(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"results": []})


urlpatterns = [
    path("search/", ArticleSearch.as_view(), name="search"),
    path("shallow/", ArticleSearch.as_view(paginate_by=2, max_pages=3), name="shallow"),
    path("vector-only/", ArticleSearch.as_view(modes=("vector",)), name="vector-only"),
    path("category/", CategorySearch.as_view(), name="category"),
    path("reports/", ReportSearch.as_view(), name="reports"),
    path("suggesting/", ArticleSearch.as_view(suggest_url="suggest"), name="suggesting"),
    path("suggest/", suggest, name="suggest"),
    path("async/", AsyncArticleSearch.as_view(), name="async"),
    path("health/", health),
]
