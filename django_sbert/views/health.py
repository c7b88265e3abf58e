"""The readiness view, for a load balancer or an orchestrator.

``health``: GET it to know whether this process can serve::

    # urls.py
    path("sbert/", include("django_sbert.urls"))     # GET /sbert/health/

200 ``{"status": "ok"}`` when every check passes, 503 ``{"status": "unavailable"}`` otherwise
(``django_sbert.serving.health``). Each check's outcome or reason, the versions warmed, the
inference paths and the pid are shown only to staff users and to a caller that sends
``Authorization: Bearer <SBERT["HEALTH"]["TOKEN"]>``: the reasons name database hosts and users,
storage locations and versions. Each client (user, else IP address) may ask
``SBERT["RATES"]["health"]`` times (120 a minute); past it the answer is 429 and no
check runs, so the view cannot be used to load the databases.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import time

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ..clients import client_address
from ..conf import sbert_settings
from ..serving import health as health_checks

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # DRF's rate periods


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
    else None (and the request counted): ``throttle_wait``."""
    return throttle_wait(
        request,
        sbert_settings.RATES.get("health"),
        "sbert-health",
        'SBERT["RATES"]["health"]',
    )


def throttle_wait(request: HttpRequest, rate: str | None, prefix: str, setting: str) -> int | None:
    """Seconds to wait when this client asked ``rate`` times (``"120/minute"``; None: no
    limit) within the last period, else None (and the request counted). Counted as DRF's
    ``SimpleRateThrottle`` counts (the API's throttles): a list of request times per client in
    Django's default cache under ``<prefix>:<sha256 of the client>``, per user id, else per
    ``REMOTE_ADDR`` (``NUM_PROXIES`` as in the API). The health view and the search pages
    (``SearchView``) use it; ``setting`` names the rate in the error for a malformed one."""
    if not rate:
        return None
    number, _, period = str(rate).partition("/")
    if not (number.isascii() and number.isdigit()) or period[:1] not in PERIODS:
        raise ImproperlyConfigured(f'{setting} must be a rate such as "120/minute", got {rate!r}.')
    seconds = PERIODS[period[0]]
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        ident = f"user-{user.pk}"
    else:
        ident = f"ip-{client_address(request)}"
    # Hashed, as the API's throttles do: any header's worth of characters makes a valid key.
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
    key = f"{prefix}:{digest}"
    now = time.time()
    history = [moment for moment in cache.get(key, []) if moment > now - seconds]
    if len(history) >= int(number):
        return max(1, math.ceil(history[-1] + seconds - now))  # the oldest leaves the period
    cache.set(key, [now, *history], seconds)
    return None
