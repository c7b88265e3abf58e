"""The app holding the Wagtail backend's index table (``sbert_wagtail``)."""

from __future__ import annotations

from django.apps import AppConfig


class SbertWagtailConfig(AppConfig):
    name = "django_sbert.contrib.wagtail"
    label = "sbert_wagtail"
    verbose_name = "django-sbert for Wagtail"
    default_auto_field = "django.db.models.BigAutoField"
