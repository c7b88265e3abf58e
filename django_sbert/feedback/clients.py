"""Who searched, without knowing who: pseudonymous client and network keys, crawlers, rates.

A client key is an HMAC (``SBERT["FEEDBACK"]["HASH_KEY"]``, else a key derived from
``SECRET_KEY``) of the user id for a logged-in visitor, else of the session key; a visitor with
neither gets a key of that one search. It is stable for a person, so their searches can be
found and deleted on request (``client_key_for_user``), yet names nobody in the log.

Client keys cost nothing to make (a script without cookies gets a new one per search), so what
learning counts as one visitor is also the *network*: ``network_key`` is an HMAC of the
address's IPv4 /24 or IPv6 /48 (the address as ``clients.client_address`` reads it, trusting
``SBERT["API"]["NUM_PROXIES"]`` proxies), never the address itself. IP addresses are never
stored: the rate filters count hashed identities in Django's cache, for one period.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import salted_hmac

from ..clients import client_address
from ..conf import sbert_settings

KEY_CHARS = 32  # hex characters of a client or network key: 128 bits
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}  # DRF's rate periods
IPV4_PREFIX, IPV6_PREFIX = 24, 48  # what one network is: a household's or an office's block
# A network's budget, in clients' budgets: a NAT or an office holds several visitors, but one
# network past this many clients' worth of searches or clicks is one script, not a crowd.
NETWORK_RATE_FACTOR = 10
# Searches whose User-Agent holds one of these (lower-case) substrings are served but not
# logged, and their clicks are ignored.
BOT_USER_AGENTS = ("bot", "crawl", "spider", "slurp", "archiver", "facebookexternalhit", "preview")


def _hash_key() -> bytes:
    configured = sbert_settings.FEEDBACK["HASH_KEY"]
    if configured:
        return str(configured).encode()
    # A key of its own, derived from SECRET_KEY: the client keys are not HMACs anything else
    # on the site computes with SECRET_KEY.
    return salted_hmac(
        "django_sbert.feedback.client",
        "client-key",
        secret=settings.SECRET_KEY,
        algorithm="sha256",  # explicit: Django's default changes from sha1 in a later release
    ).digest()


def _keyed(value: str) -> str:
    digest = hmac.new(_hash_key(), value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return digest.hexdigest()[:KEY_CHARS]


def client_key_for_user(user: Any) -> str:
    """The client key of a user (an instance or a primary key), as their searches carry it."""
    return _keyed(f"user:{getattr(user, 'pk', user)}")


def client_key_for_session(session_key: str) -> str:
    """The client key of an anonymous visitor's session."""
    return _keyed(f"session:{session_key}")


def network_of(address: str) -> str:
    """The network ``address`` belongs to: its IPv4 /24 or IPv6 /48 (an IPv4 address mapped
    into IPv6 counts as IPv4); ``""`` when it is no address."""
    try:
        ip = ipaddress.ip_address(str(address).strip())
    except ValueError:
        return ""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = IPV4_PREFIX if ip.version == 4 else IPV6_PREFIX
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def network_key_of(address: str) -> str:
    """The network key of ``address``: a keyed hash of its network (``network_of``), or of
    "unknown" when it is no address (all such requests are one network)."""
    return _keyed(f"network:{network_of(address) or 'unknown'}")


def network_key(request: Any) -> str:
    """The request's network key (``network_key_of`` its ``client_address``)."""
    return network_key_of(client_address(request))


def _user(request: Any) -> Any:
    user = getattr(request, "user", None)  # absent without AuthenticationMiddleware
    return user if user is not None and user.is_authenticated else None


def _session_key(request: Any) -> str | None:
    session = getattr(request, "session", None)
    return getattr(session, "session_key", None) if session is not None else None


def client_key(request: Any, search_id: Any = None) -> str:
    """The request's client key: by user, else session, else of ``search_id`` alone."""
    user = _user(request)
    if user is not None:
        return client_key_for_user(user)
    session_key = _session_key(request)
    if session_key:
        return client_key_for_session(session_key)
    return _keyed(f"search:{search_id}")


def is_bot(request: Any) -> bool:
    """Whether the User-Agent holds one of ``BOT_USER_AGENTS``."""
    agent = str(request.META.get("HTTP_USER_AGENT", "")).lower()
    return bool(agent) and any(part in agent for part in BOT_USER_AGENTS)


def _rate_ident(request: Any) -> str:
    user = _user(request)
    if user is not None:
        return f"user:{user.pk}"
    session_key = _session_key(request)
    if session_key:
        return f"session:{session_key}"
    return f"addr:{client_address(request)}"  # hashed below, kept one period in the cache


def parse_rate(rate: str, setting: str) -> tuple[int, int]:
    """``"60/minute"`` -> (60, 60): requests and seconds."""
    number, _, period = str(rate).partition("/")
    if not number.isdigit() or period[:1] not in PERIODS:
        raise ImproperlyConfigured(
            f'SBERT["FEEDBACK"]["{setting}"] must be a rate such as "60/minute", got {rate!r}.'
        )
    return int(number), PERIODS[period[0]]


def over_rate(request: Any, setting: str) -> bool:
    """Count this request against ``SBERT["RATES"][setting]`` (a rate or None) for its
    client, and against ``NETWORK_RATE_FACTOR`` times it for its network; True once either is
    past its budget in the current period.

    A fixed window in Django's default cache: one ``incr`` per count, where DRF's throttles
    read and write a list of times (this runs on every logged search).
    """
    rate = sbert_settings.RATES.get(setting)
    if not rate:
        return False
    allowed, seconds = parse_rate(rate, setting)
    window = int(time.time() // seconds)
    network = f"net:{network_of(client_address(request)) or 'unknown'}"
    budgets = ((_rate_ident(request), allowed), (network, allowed * NETWORK_RATE_FACTOR))
    over = False
    for ident, budget in budgets:
        digest = hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()
        over = _count(f"sbert-feedback:{setting}:{digest}:{window}", seconds) > budget or over
    return over


def _count(key: str, seconds: int) -> int:
    """Add one to the cache counter ``key`` (kept one period); its new value."""
    try:
        return cache.incr(key)
    except ValueError:  # the window's first request (or the entry expired)
        if cache.add(key, 1, seconds + 1):
            return 1
        return cache.incr(key)
