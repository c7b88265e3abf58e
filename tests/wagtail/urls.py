"""The Wagtail admin and pages, for the admin search test."""

from django.urls import include, path
from wagtail import urls as wagtail_urls
from wagtail.admin import urls as wagtailadmin_urls

urlpatterns = [
    path("cms/", include(wagtailadmin_urls)),
    path("", include(wagtail_urls)),
]
