"""django-sbert over HTTP with Django REST framework (an optional dependency).

::

    # urls.py
    path("api/sbert/", include("django_sbert.api.urls"))

    # apps.py, in ready()
    from django_sbert import api
    api.register(Article, fields=["id", "title"])

Modules, one per concept as in DRF: ``registry`` (which models may be searched, and how each
is shown), ``views`` (search/, similar/, suggest/, embed/, events/), ``finetuning`` (pairs/,
training-runs/, encoder-versions/), ``evaluations`` (evaluations/: search quality on judgment
lists, for staff), ``serializers``, ``filters`` (``SemanticSearchFilter`` for any list view),
``pagination``, ``parsers`` (bodies over the size limit refused), ``permissions``,
``throttling`` (rate limits with defaults), ``errors`` (503 with the reason when a part is
away), ``schema`` (OpenAPI through drf-spectacular, when installed), ``settings``
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
