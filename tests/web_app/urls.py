"""django-sbert's health view where docs/deployment.md mounts it, and the REST API."""

from django.urls import include, path

from django_sbert.api import registry
from tests.testapp.models import Article

registry.register(Article, fields=["id", "title", "embedding_version"])

urlpatterns = [
    path("sbert/", include("django_sbert.urls")),
    path("api/sbert/", include("django_sbert.api.urls")),
]
