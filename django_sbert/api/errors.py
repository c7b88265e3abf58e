"""How the API answers when a part it needs is away: 503 with the reason, never a 500.

``ServiceErrorsMixin`` goes on every view of the API; it turns a
``django_sbert.exceptions.ServiceUnavailable`` (broker unreachable, the serving version's files
missing on this host, a search over ``STATEMENT_TIMEOUT``) into ``ServiceUnavailableError``,
and credentials the database cannot even look up into a 401.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DataError
from rest_framework import status
from rest_framework.exceptions import APIException, AuthenticationFailed

from ..exceptions import ServiceUnavailable

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


class ServiceUnavailableError(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The service is temporarily unavailable; try again shortly."
    default_code = "service_unavailable"


class ServiceErrorsMixin:
    """Answer ``ServiceUnavailable`` with 503, its message and a ``Retry-After`` header."""

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
            logger.warning("%s: %s", type(exc).__name__, exc)
            response = super().handle_exception(ServiceUnavailableError(str(exc)))  # type: ignore[misc]
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        return super().handle_exception(exc)  # type: ignore[misc]
