"""What the site tells a client when a part is away (a 503), shared by the REST API
(``api/errors.py``) and the plain views, so neither needs Django REST framework to answer the
same way.

* ``client_message(exc)``: the words a client reads. The exception's own message names the
  server's insides (storage class, bucket, cache paths, sha256 sums) and goes to the log.
* ``new_request_id()``: the id that ties the client's 503 to its log record.
"""

from __future__ import annotations

import uuid

from ..exceptions import (
    BrokerUnavailable,
    EncoderAway,
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
    (EncoderAway, "Search by meaning is unavailable on this server for a moment; try again."),
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
