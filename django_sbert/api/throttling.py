"""Rate limits of search/, similar/, suggest/, embed/ and schema/, with defaults that need no setup.

DRF's ScopedRateThrottle raises ImproperlyConfigured until REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
names every scope; these read SBERT["RATES"] instead, which has defaults. Each
client is counted separately: by user id when authenticated, else by IP address. Counts live in
Django's default cache, so use a shared cache (Redis, Memcached) when several processes serve the
API.

The address of an anonymous client is REMOTE_ADDR unless SBERT["API"]["NUM_PROXIES"] says how
many proxies in front of the site append to X-Forwarded-For. DRF's own ``get_ident`` trusts the
whole header when its NUM_PROXIES is None, so a client sending a new X-Forwarded-For with each
request would get a fresh count each time.
"""

from __future__ import annotations

import hashlib

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from ..clients import client_address
from ..conf import sbert_settings


class SbertRateThrottle(SimpleRateThrottle):
    """A SimpleRateThrottle whose rate is SBERT["RATES"][scope] (None: off)."""

    scope = ""
    cache_format = "sbert-throttle:%(scope)s:%(ident)s"

    def get_rate(self) -> str | None:
        return sbert_settings.RATES.get(self.scope)

    def get_ident(self, request: Request) -> str:
        return client_address(request)

    def get_cache_key(self, request: Request, view: APIView) -> str:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            ident = f"user-{user.pk}"
        else:
            ident = f"ip-{self.get_ident(request)}"
        # Hashed: a header's worth of characters (or a long primary key) would make a key
        # Memcached refuses (over 250 characters, or with spaces).
        digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
        return self.cache_format % {"scope": self.scope, "ident": digest}


class SearchRateThrottle(SbertRateThrottle):
    """search/ and similar/ together: each query costs an encoder pass and an index scan."""

    scope = "search"


class SuggestRateThrottle(SbertRateThrottle):
    """suggest/: a request per pause in typing, so a rate of its own that typing does not
    exhaust (600/minute by default), counted apart from search/'s."""

    scope = "suggest"


class EmbedRateThrottle(SbertRateThrottle):
    """embed/: each request may encode up to EMBED_MAX_TEXTS texts."""

    scope = "embed"


class SchemaRateThrottle(SbertRateThrottle):
    """schema/: each request generates the whole OpenAPI document."""

    scope = "schema"
