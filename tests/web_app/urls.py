"""django-sbert's health view where docs/deployment.md mounts it, the REST API, a search page,
and (test site only) ``modules/``: which heavy libraries this process has imported."""

import os
import sys

from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from django_sbert.api import registry
from django_sbert.views import SearchView
from tests.testapp.models import Article

registry.register(Article, fields=["id", "title", "embedding_version"])

HEAVY = ("torch", "transformers", "onnxruntime", "sentence_transformers")


def modules(request: HttpRequest) -> JsonResponse:
    """The heavy libraries imported in this process, and its pid (tests/serving/test_light_web)."""
    return JsonResponse({"pid": os.getpid(), "heavy": [m for m in HEAVY if m in sys.modules]})


urlpatterns = [
    path("sbert/", include("django_sbert.urls")),
    path("api/sbert/", include("django_sbert.api.urls")),
    path("search/", SearchView.as_view(model=Article), name="search"),
    path("modules/", modules),
]
