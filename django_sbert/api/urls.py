"""URLs of the sbert API.

Mount them with ``path("api/sbert/", include("django_sbert.api.urls"))``.
"""

from __future__ import annotations

from django.urls import path

from .schema import SchemaView
from .views import EmbedView, SearchView, SimilarView

app_name = "sbert-api"

urlpatterns = [
    path("search/", SearchView.as_view(), name="search"),
    path("similar/<str:model>/<str:pk>/", SimilarView.as_view(), name="similar"),
    path("embed/", EmbedView.as_view(), name="embed"),
    path("schema/", SchemaView.as_view(), name="schema"),
]
