"""URLs of the admin tests: the Django admin, with django_sbert's and the test app's models."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
