"""Rate limits without Django REST framework: parse a rate, name a client, count a window.

One module under every throttle of the package: the REST API's (``api/throttling.py``, DRF's
classes over these functions), the search pages' (``views/search.py``, the same count as the
API's ``search`` scope), the health view's, and the search log's and click events' budgets
(``feedback/visitors.py``, which adds a network's budget)::

    wait = throttle_wait(request, rate("health"), "sbert-health", rate_setting("health"))
    if wait is not None:                               # seconds until the client may ask again
        ...429 with Retry-After: wait

``parse_rate``, ``client_address`` (trusting ``SBERT["API"]["NUM_PROXIES"]`` proxies),
``client_ident``, ``count`` / ``count_all`` (DRF's window, in Django's default cache) and
``rate(scope)`` (``SBERT["RATES"][scope]``, read in one place) each say what they do.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from .conf import sbert_settings

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # DRF's rate periods, by first letter


def rate(scope: str) -> str | None:
    """The rate of ``scope`` (``SBERT["RATES"]``, merged over the defaults: a project naming
    one scope keeps the others'); None: no limit."""
    return sbert_settings.RATES.get(scope)


def rate_setting(scope: str) -> str:
    """How ``rate(scope)``'s setting is written, for its error."""
    return f'SBERT["RATES"][{scope!r}]'


def parse_rate(rate: str, setting: str) -> tuple[int, int]:
    """``"60/minute"`` -> (60, 60): requests and seconds. ``setting`` names the rate in the
    ImproperlyConfigured a malformed one raises."""
    number, _, period = str(rate).partition("/")
    if not (number.isascii() and number.isdigit()) or period[:1] not in PERIODS:
        raise ImproperlyConfigured(f'{setting} must be a rate such as "60/minute", got {rate!r}.')
    return int(number), PERIODS[period[0]]


def client_address(request: Any) -> str:
    """The client's IP address, trusting only ``SBERT["API"]["NUM_PROXIES"]`` proxies.

    None (the default) trusts no proxy: REMOTE_ADDR. With N, the Nth address from the right of
    X-Forwarded-For (each trusted proxy appends the address it received the request from), as
    DRF does; 0 is REMOTE_ADDR too.
    """
    remote_addr = str(request.META.get("REMOTE_ADDR") or "")
    num_proxies = sbert_settings.API["NUM_PROXIES"]
    if num_proxies is None:
        return remote_addr
    if isinstance(num_proxies, bool) or not isinstance(num_proxies, int) or num_proxies < 0:
        raise ImproperlyConfigured(
            f"SBERT['API']['NUM_PROXIES'] must be None or a whole number >= 0 (how many proxies "
            f"in front of the site append to X-Forwarded-For), got {num_proxies!r}."
        )
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if num_proxies == 0 or not forwarded:
        return remote_addr
    addresses = forwarded.split(",")
    return addresses[-min(num_proxies, len(addresses))].strip()


def authenticated_user(request: Any) -> Any:
    """The request's logged-in user, or None (also without AuthenticationMiddleware)."""
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def session_key(request: Any) -> str | None:
    """The request's session key, or None (no session, or none saved yet)."""
    session = getattr(request, "session", None)
    return getattr(session, "session_key", None) if session is not None else None


def client_ident(request: Any, *, sessions: bool = False) -> str:
    """Who a rate counts: ``user-<pk>``, else ``session-<key>`` where ``sessions`` is True,
    else ``ip-<client_address>``.

    The HTTP throttles leave sessions out (``sessions=False``): a client without cookies gets
    none, and one per request would be a fresh count. The search log's budgets count them, and
    a network's budget besides (``feedback/visitors.py``).
    """
    user = authenticated_user(request)
    if user is not None:
        return f"user-{user.pk}"
    if sessions:
        key = session_key(request)
        if key:
            return f"session-{key}"
    return f"ip-{client_address(request)}"


def count_key(prefix: str, ident: str) -> str:
    """The cache key of ``ident``'s window under ``prefix``: hashed, since a header's worth of
    characters (or a long primary key) would make a key Memcached refuses (over 250
    characters, or with spaces)."""
    digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}:{digest}"


def count(prefix: str, ident: str, allowed: int, seconds: int) -> int | None:
    """Count one request of ``ident`` against ``allowed`` per ``seconds``: None when under
    (the request recorded), else the seconds until the oldest request leaves the window.

    DRF's ``SimpleRateThrottle`` window: the request times within the last period, newest
    first, in Django's default cache, so the API's ``search`` scope and the search pages share
    one count (under ``count_key``).
    """
    return count_all(prefix, [(ident, allowed)], seconds)[0]


def count_all(prefix: str, budgets: Sequence[tuple[str, int]], seconds: int) -> list[int | None]:
    """``count`` for several ``(ident, allowed)`` at once (a client and its network), in one
    read and at most one write of the cache: each one's wait, or None where it was under and
    the request recorded."""
    keys = [count_key(prefix, ident) for ident, _ in budgets]
    stored = cache.get_many(keys)
    now = time.time()
    waits: list[int | None] = []
    written = {}
    for key, (_, allowed) in zip(keys, budgets, strict=True):
        history = [moment for moment in stored.get(key, []) if moment > now - seconds]
        if len(history) >= allowed:
            waits.append(max(1, math.ceil(history[-1] + seconds - now)))
        else:
            waits.append(None)
            written[key] = [now, *history]
    if written:
        cache.set_many(written, seconds)
    return waits


def throttle_wait(request: Any, rate: str | None, prefix: str, setting: str) -> int | None:
    """Seconds this client must wait when past ``rate`` (None: no limit) within the last
    period, else None and the request counted: ``count`` under ``prefix`` for
    ``client_ident(request)``. ``setting`` names the rate in the error for a malformed one."""
    if not rate:
        return None
    allowed, seconds = parse_rate(rate, setting)
    return count(prefix, client_ident(request), allowed, seconds)
