"""URLs of SuggestView's tests (tests/views/test_suggest_view.py)."""

from __future__ import annotations

from django.urls import path

from django_sbert.views import SuggestView
from tests.testapp.models import Article

urlpatterns = [
    path("suggest/", SuggestView.as_view(model=Article), name="suggest"),
    path(
        "published/",
        SuggestView.as_view(
            queryset=Article.objects.filter(published=True), fields=["category", "published"]
        ),
    ),
    path("three/", SuggestView.as_view(model=Article, k=3, max_k=4)),
    path("unconfigured/", SuggestView.as_view()),
    path("vectors/", SuggestView.as_view(model=Article, fields=["embedding"])),
]
