"""What the site tells a client, and who the client is: shared by the REST API and the plain
views, so neither needs Django REST framework to answer the same way.

* ``client_message(exc)``: the words a client reads when a part is away (a 503). The
  exception's own message names the server's insides (storage class, bucket, cache paths,
  sha256 sums) and goes to the log instead.
* ``client_address(request)``: the client's IP address for throttling, trusting only
  ``SBERT["API"]["NUM_PROXIES"]`` proxies in front of the site.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .conf import sbert_settings
from .exceptions import (
    BrokerUnavailable,
    EncoderBusy,
    SearchTimeout,
    ServiceUnavailable,
    VersionUnavailable,
)

GENERIC_MESSAGE = "The service is temporarily unavailable; try again shortly."
CLIENT_MESSAGES: tuple[tuple[type[ServiceUnavailable], str], ...] = (
    (
        BrokerUnavailable,
        "The task broker could not be reached; nothing was queued. Try again shortly.",
    ),
    (VersionUnavailable, "Search is unavailable on this server for a moment; try again shortly."),
    (EncoderBusy, "Search is busy on this server; try again in a moment."),
)


def client_message(exc: ServiceUnavailable) -> str:
    """The message a client may read for ``exc``: general words for its kind of outage.

    ``SearchTimeout`` says what the client can do about it (and the time limit, nothing else);
    every other kind gets a fixed sentence, since its own message names the server's insides.
    """
    if isinstance(exc, SearchTimeout):
        seconds = f" ({exc.seconds:g} s)" if exc.seconds else ""
        return (
            f"The search ran longer than this site allows{seconds} and was cancelled. "
            "Try a more specific query, or try again later."
        )
    return next(
        (message for kind, message in CLIENT_MESSAGES if isinstance(exc, kind)), GENERIC_MESSAGE
    )


def new_request_id() -> str:
    """A fresh id that ties a client's 503 to its log record."""
    return uuid.uuid4().hex


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
