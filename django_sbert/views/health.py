"""The readiness view, for a load balancer or an orchestrator.

``health``: GET it to know whether this process can serve::

    # urls.py
    path("sbert/", include("django_sbert.urls"))     # GET /sbert/health/

200 ``{"status": "ok", "checks": {...}}`` when every check passes, 503 with the same JSON
and each failing check's reason otherwise (``django_sbert.serving.health``).
"""

from __future__ import annotations

import os

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..serving import health as health_checks


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """200 when this process is ready (databases answer, encoders warmed), else 503."""
    report = health_checks.check()
    body = {**report.as_dict(), "pid": os.getpid()}
    return JsonResponse(body, status=200 if report.ok else 503)
