"""The search page, the article pages, the admin, the REST API at api/sbert/, and the
readiness view at sbert/health/."""

from __future__ import annotations

import contextlib

from django.contrib import admin
from django.urls import NoReverseMatch, include, path
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

# Staff-only endpoints of the fine-tuning workflow, listed when this django-sbert has them.
TRAINING_ENDPOINTS = {
    "training pairs (staff)": "sbert-api:pair-list",
    "training runs (staff)": "sbert-api:training-run-list",
    "encoder versions (staff)": "sbert-api:encoder-version-list",
}


@api_view(["GET"])
@permission_classes([AllowAny])  # the list of endpoints is public; each says who may use it
def api_root(request: Request, format: str | None = None) -> Response:
    """The endpoints of django-sbert's REST API, with example requests (docs/api.md)."""
    from articles.models import Article

    search = reverse("sbert-api:search", request=request)
    first = Article.objects.order_by("pk").values_list("pk", flat=True).first() or 1
    similar = reverse(
        "sbert-api:similar", kwargs={"model": "articles.article", "pk": first}, request=request
    )
    endpoints = {
        "search": f"{search}?model=articles.article&q=central+banks+raise+interest+rates",
        "similar": similar,
        "embed (POST, logged in)": reverse("sbert-api:embed", request=request),
        "schema": reverse("sbert-api:schema", request=request),
    }
    for label, name in TRAINING_ENDPOINTS.items():
        with contextlib.suppress(NoReverseMatch):
            endpoints[label] = reverse(name, request=request)
    return Response(endpoints)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/sbert/", api_root, name="api-root"),
    path("api/sbert/", include("django_sbert.api.urls")),
    path("api-auth/", include("rest_framework.urls")),
    path("sbert/", include("django_sbert.urls")),  # GET sbert/health/: readiness
    path("", include("articles.urls")),
]
