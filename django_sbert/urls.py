"""URLs of django-sbert's plain Django views: ``path("sbert/", include("django_sbert.urls"))``."""

from django.urls import path

from .views import health

app_name = "django_sbert"
urlpatterns = [path("health/", health, name="health")]
