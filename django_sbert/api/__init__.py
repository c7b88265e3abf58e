"""django-sbert over HTTP with Django REST framework (an optional dependency).

::

    # urls.py
    path("api/sbert/", include("django_sbert.api.urls"))

    # apps.py, in ready()
    from django_sbert import api
    api.register(Article, fields=["id", "title"])

See docs/api.md.
"""

from __future__ import annotations

import importlib.util

from ..exceptions import MissingAPIDependencies

if importlib.util.find_spec("rest_framework") is None:
    raise MissingAPIDependencies(
        "django_sbert.api needs Django REST framework, which is not installed: "
        "pip install 'django-sbert[api]' (djangorestframework and drf-spectacular). "
        "Searching from Python (similar_to(), the admin) needs neither."
    )

from .registry import (  # noqa: E402
    AlreadyRegistered,
    NotRegistered,
    SearchEntry,
    register,
    registry,
    unregister,
)

__all__ = [
    "AlreadyRegistered",
    "NotRegistered",
    "SearchEntry",
    "register",
    "registry",
    "unregister",
]
