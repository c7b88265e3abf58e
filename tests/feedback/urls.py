"""URLs of the feedback tests: the REST API and the plain views where the docs mount them, and
a search page (``SearchView``)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from tests.views.urls import ArticleSearch

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/sbert/", include("django_sbert.api.urls")),
    path("sbert/", include("django_sbert.urls")),
    path("search/", ArticleSearch.as_view(), name="search"),
    path("shallow/", ArticleSearch.as_view(paginate_by=2), name="shallow"),
]
