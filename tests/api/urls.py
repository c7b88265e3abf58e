"""URLs of the API tests: the sbert API where the docs say to mount it, plus a user viewset."""

from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from tests.api.views import ArticleViewSet, UnpaginatedArticleViewSet

router = SimpleRouter()
router.register("articles", ArticleViewSet, basename="article")
router.register("all-articles", UnpaginatedArticleViewSet, basename="all-article")

urlpatterns = [
    path("api/sbert/", include("django_sbert.api.urls")),
    path("", include(router.urls)),
]
