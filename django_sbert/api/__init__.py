"""django-sbert over HTTP with Django REST framework (an optional dependency).

::

    # urls.py
    path("api/sbert/", include("django_sbert.api.urls"))

    # apps.py, in ready()
    from django_sbert import api
    api.register(Article, fields=["id", "title"])

Modules, one per concept as in DRF: ``registry`` (which models may be searched, and how),
``views``, ``finetuning`` and ``evaluations`` (the endpoints), ``serializers``, ``filters``
(``SemanticSearchFilter``), ``pagination``, ``parsers``, ``permissions``, ``throttling``,
``errors`` (503 with the reason), ``schema`` (OpenAPI, with drf-spectacular), ``settings``
(``SBERT["API"]``), ``urls``. See docs/api.md.
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
