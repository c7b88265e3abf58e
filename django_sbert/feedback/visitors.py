"""Who searched, without knowing who: pseudonymous client and network keys, crawlers, budgets.

A client key is an HMAC (``SBERT["FEEDBACK"]["HASH_KEY"]``, else a key derived from
``SECRET_KEY``) of the user id for a logged-in visitor, else of the session key; a visitor with
neither gets a key of that one search. It is stable for a person, so their searches can be
found and deleted on request (``client_key_for_user``), yet names nobody in the log.

Client keys cost nothing to make (a script without cookies gets a new one per search), so what
learning counts as one visitor is also the *network*: ``network_key`` is an HMAC of the
address's IPv4 /24 or IPv6 /48 (the address as ``throttling.client_address`` reads it,
trusting ``SBERT["API"]["NUM_PROXIES"]`` proxies), never the address itself. IP addresses are
never stored: the budgets (``over_rate``) count hashed identities in Django's cache
(``throttling.count``), for one period.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from typing import Any

from django.conf import settings
from django.utils.crypto import salted_hmac

from ..conf import sbert_settings
from ..throttling import (
    authenticated_user,
    client_address,
    client_ident,
    count_all,
    parse_rate,
    rate_setting,
    session_key,
)
from ..throttling import rate as throttle_rate

KEY_CHARS = 32  # hex characters of a client or network key: 128 bits
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


def client_key(request: Any, search_id: Any = None) -> str:
    """The request's client key: by user, else session, else of ``search_id`` alone."""
    user = authenticated_user(request)
    if user is not None:
        return client_key_for_user(user)
    session = session_key(request)
    if session:
        return client_key_for_session(session)
    return _keyed(f"search:{search_id}")


def is_bot(request: Any) -> bool:
    """Whether the User-Agent holds one of ``BOT_USER_AGENTS``."""
    agent = str(request.META.get("HTTP_USER_AGENT", "")).lower()
    return bool(agent) and any(part in agent for part in BOT_USER_AGENTS)


def over_rate(request: Any, key: str) -> bool:
    """Count this request against ``SBERT["RATES"][key]`` (a rate or None) for its client
    (user, else session, else address), and against ``NETWORK_RATE_FACTOR`` times it for its
    network; True once either is past its budget within the last period.

    Both windows are ``throttling.count_all``'s: one read and one write of Django's cache.
    """
    rate = throttle_rate(key)
    if not rate:
        return False
    allowed, seconds = parse_rate(rate, rate_setting(key))
    prefix = f"sbert-feedback:{key}"
    network = f"net-{network_of(client_address(request)) or 'unknown'}"
    client = client_ident(request, sessions=True)
    budgets = [(client, allowed), (network, allowed * NETWORK_RATE_FACTOR)]
    return any(wait is not None for wait in count_all(prefix, budgets, seconds))
