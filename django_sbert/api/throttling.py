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

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from ..throttling import (
    client_address,
    client_ident,
    count,
    count_key,
    rate_setting,
)
from ..throttling import parse_rate as parse_sbert_rate
from ..throttling import rate as scope_rate


class SbertRateThrottle(SimpleRateThrottle):
    """A SimpleRateThrottle whose rate is SBERT["RATES"][scope] (None: off),
    parsed, named and counted by ``django_sbert.throttling``: the search pages count the
    ``search`` scope with it."""

    scope = ""
    cache_prefix = "sbert-throttle:%(scope)s"

    def get_rate(self) -> str | None:
        return scope_rate(self.scope)

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        if rate is None:
            return (None, None)
        return parse_sbert_rate(rate, rate_setting(self.scope))

    def get_ident(self, request: Request) -> str:
        return client_address(request)

    def get_cache_key(self, request: Request, view: APIView | None) -> str:
        """The key ``throttling.count`` keeps this client's window under."""
        return count_key(self.cache_prefix % {"scope": self.scope}, client_ident(request))

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        prefix = self.cache_prefix % {"scope": self.scope}
        self.wait_seconds = count(prefix, client_ident(request), self.num_requests, self.duration)
        return self.wait_seconds is None

    def wait(self) -> float | None:
        return getattr(self, "wait_seconds", None)


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
