"""Rate limits of search/, similar/ and embed/, with defaults that work without configuration.

DRF's ScopedRateThrottle raises ImproperlyConfigured until REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
names every scope; these read SBERT["API"]["THROTTLE_RATES"] instead, which has defaults. Each
client is counted separately: by user id when authenticated, else by IP address. Counts live in
Django's default cache, so use a shared cache (Redis, Memcached) when several processes serve the
API.
"""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from .settings import api_settings


class SbertRateThrottle(SimpleRateThrottle):
    """A SimpleRateThrottle whose rate is SBERT["API"]["THROTTLE_RATES"][scope] (None: off)."""

    scope = ""
    cache_format = "sbert-throttle:%(scope)s:%(ident)s"

    def get_rate(self) -> str | None:
        return api_settings.THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            ident = f"user-{user.pk}"
        else:
            ident = f"ip-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class SearchRateThrottle(SbertRateThrottle):
    """search/ and similar/ together: each query costs an encoder pass and an index scan."""

    scope = "search"


class EmbedRateThrottle(SbertRateThrottle):
    """embed/: each request may encode up to EMBED_MAX_TEXTS texts."""

    scope = "embed"
