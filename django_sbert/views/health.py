"""The readiness view, for a load balancer or an orchestrator.

``health``: GET it to know whether this process can serve::

    # urls.py
    path("sbert/", include("django_sbert.urls"))     # GET /sbert/health/

200 ``{"status": "ok"}`` when every check passes, 503 ``{"status": "unavailable"}`` otherwise
(``django_sbert.serving.health``). The details (reasons name database hosts, storage locations
and versions) go only to staff users and to a caller with ``SBERT["HEALTH"]["TOKEN"]``, and
``SBERT["RATES"]["health"]`` bounds the checks a client can make run (docs/deployment.md).
"""

from __future__ import annotations

import hmac
import os

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..conf import sbert_settings
from ..serving import health as health_checks
from ..throttling import rate, rate_setting, throttle_wait


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    """200 when this process is ready (databases answer, encoders warmed), else 503; the
    details to staff and to the token's bearer only."""
    wait = _throttled(request)
    if wait is not None:
        response = JsonResponse({"status": "throttled"}, status=429)
        response["Retry-After"] = str(wait)
        return response
    report = health_checks.check()
    status = 200 if report.ok else 503
    if not may_see_details(request):
        return JsonResponse({"status": report.as_dict()["status"]}, status=status)
    return JsonResponse({**report.as_dict(), "pid": os.getpid()}, status=status)


def may_see_details(request: HttpRequest) -> bool:
    """A logged-in active staff user, or a caller presenting ``SBERT["HEALTH"]["TOKEN"]`` as
    ``Authorization: Bearer <token>`` (compared in constant time)."""
    token = sbert_settings.HEALTH["TOKEN"]
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "surrogateescape"), str(token).encode()
        ):
            return True
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    return bool(user is not None and user.is_active and user.is_staff)


def _throttled(request: HttpRequest) -> int | None:
    """Seconds to wait when this client asked ``RATES["health"]`` times within the last period,
    else None (and the request counted)."""
    return throttle_wait(request, rate("health"), "sbert-health", rate_setting("health"))
