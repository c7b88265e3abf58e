"""How the API answers when a part it needs is away: 503 with a request id, never a 500.

``ServiceErrorsMixin`` goes on every view of the API; it turns a
``django_sbert.exceptions.ServiceUnavailable`` (broker unreachable, the serving version's files
missing on this host, a search over ``STATEMENT_TIMEOUT``, the async encoding queue full) into
``ServiceUnavailableError``, and credentials the database cannot even look up into a 401.

What the client reads is written for clients: what went away, in general words, and a
``request_id``. The exception's own message (storage class, bucket, cache paths, sha256 sums,
OS errors) goes to the log, at WARNING with the same id, and to staff users, who run the site
(docs/api.md shows an answer).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DataError
from rest_framework import status
from rest_framework.exceptions import APIException, AuthenticationFailed

from ..exceptions import ServiceUnavailable
from ..views.errors import GENERIC_MESSAGE, client_message, new_request_id

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
REQUEST_ID_HEADER = "X-Request-ID"


class ServiceUnavailableError(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = GENERIC_MESSAGE
    default_code = "service_unavailable"


class ServiceErrorsMixin:
    """Answer ``ServiceUnavailable`` with 503, a client's message, a request id (in the body
    and the ``X-Request-ID`` header) and ``Retry-After``; the details go to the log, and to
    staff users in the body."""

    def perform_authentication(self, request: Any) -> None:
        """Credentials that hold a NUL byte (a Basic-Auth header can carry any byte) make
        Django's ``ModelBackend`` query fail on PostgreSQL with ``DataError``; they name no
        user, so the answer is 401, not 500."""
        try:
            super().perform_authentication(request)  # type: ignore[misc]
        except DataError as exc:
            request._not_authenticated()  # as DRF does for a failed authenticator
            raise AuthenticationFailed("Invalid username/password.") from exc

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, ServiceUnavailable):
            request = getattr(self, "request", None)
            request_id = new_request_id()
            logger.warning(
                "503 for %s %s (request %s): %s: %s",
                getattr(request, "method", "?"),
                getattr(request, "path", "?"),
                request_id,
                type(exc).__name__,
                exc,
            )
            detail = str(exc) if _is_staff(request) else client_message(exc)
            error = ServiceUnavailableError({"detail": detail, "request_id": request_id})
            response = super().handle_exception(error)  # type: ignore[misc]
            response["Retry-After"] = str(getattr(exc, "retry_after", RETRY_AFTER_SECONDS))
            response[REQUEST_ID_HEADER] = request_id
            return response
        return super().handle_exception(exc)  # type: ignore[misc]


def _is_staff(request: Any) -> bool:
    # request.user was set by authentication before the view ran; a failure before it leaves
    # the client anonymous (DRF's _not_authenticated), so reading it here costs no query.
    user = getattr(request, "_user", None)
    return bool(user is not None and user.is_active and user.is_staff)
