"""The REST API (search, similar) with Article registered, and the probe each web process
answers: which encoder version it would search with now."""

from __future__ import annotations

from django.http import JsonResponse
from django.urls import include, path

from benchmarks.django_setup import article_model
from django_sbert import api

from .probe import probe

Article = article_model()

if not api.registry.is_registered(Article):
    # embedding_version: the load test checks the version of every returned row.
    api.register(Article, fields=["id", "title", "embedding_version"])


def probe_view(request):
    return JsonResponse(probe())


urlpatterns = [
    path("api/sbert/", include("django_sbert.api.urls")),
    path("probe/", probe_view),
]
