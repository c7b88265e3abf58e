"""A Wagtail search backend on django-sbert: pages, snippets, images and documents ranked by
meaning (docs/wagtail.md).

::

    INSTALLED_APPS = [..., "django_sbert", "django_sbert.contrib.wagtail"]
    WAGTAILSEARCH_BACKENDS = {
        "default": {
            "BACKEND": "django_sbert.contrib.wagtail",
            "OPTIONS": {"MODE": "hybrid", "ENCODER": "default"},
        }
    }

Wagtail loads ``SearchBackend`` from this module; it is imported on first use so that adding
the app to ``INSTALLED_APPS`` imports no models before Django is ready.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "SearchBackend":
        # Django's loading order: backend.py imports models, not loadable during app loading.
        from .backend import SearchBackend

        return SearchBackend
    raise AttributeError(name)
