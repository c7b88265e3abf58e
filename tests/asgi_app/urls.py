"""The async search view, a health check, and the REST API with Article registered."""

from django.urls import include, path

from django_sbert.api import registry
from tests.asgi_app.views import health, search
from tests.testapp.models import Article

registry.register(Article, fields=["id", "title", "category"])

urlpatterns = [
    path("health/", health),
    path("search/", search),
    path("api/sbert/", include("django_sbert.api.urls")),
]
