"""Search pages that cannot answer as routed, and ones that can, for check E015
(tests/views/test_search_check.py)."""

from __future__ import annotations

from django.urls import include, path

from django_sbert.views import AsyncSearchView, SearchView, SuggestView
from tests.testapp.models import Article, Note


class NoteSearch(SearchView):
    """Note's field has no keyword_search=True: the default modes cannot work."""

    model = Note


class AsyncNoteSearch(AsyncSearchView):
    model = Note


class ArticleSearch(SearchView):
    model = Article


nested = [path("notes/", NoteSearch.as_view(), name="nested-notes")]

urlpatterns = [
    path("notes/", NoteSearch.as_view(), name="notes"),
    path("notes-vector/", NoteSearch.as_view(modes=("vector",)), name="notes-vector"),
    path("async-notes/", AsyncNoteSearch.as_view(), name="async-notes"),
    path("site/", include(nested)),
    path("articles/", ArticleSearch.as_view(), name="articles"),
    path("suggesting/", ArticleSearch.as_view(suggest_url="suggest"), name="suggesting"),
    path("lost/", ArticleSearch.as_view(suggest_url="nowhere"), name="lost"),
    path("suggest/", SuggestView.as_view(model=Article), name="suggest"),
]
