"""URLs of django-sbert's plain Django views: ``path("sbert/", include("django_sbert.urls"))``."""

from django.urls import path

from .views import click, health

app_name = "django_sbert"
urlpatterns = [
    path("health/", health, name="health"),
    # Clicks on logged search results, from django_sbert/clicks.js (docs/learning.md).
    path("click/", click, name="click"),
]
