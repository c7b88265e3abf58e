"""The exceptions django-sbert raises for its users to catch: one family under ``SbertError``.

::

    from django_sbert.exceptions import SbertError, ServiceUnavailable

Each keeps the built-in or Django base it had (``LookupError``, ``ValueError``,
``OperationalError``...), so code that catches those still catches them. ``SbertError`` and the
ML core's own exceptions are defined in ``encoder/exceptions.py`` (the core imports nothing of
Django, nor anything above it) and re-exported here; docs/reference.md lists the family.

The parts a request needs can be away: the broker, a model's files, time (``SearchTimeout``).
Each of those is a ``ServiceUnavailable``: the request was valid and may succeed later, and
nothing was left half done; the REST API answers them with 503 (``api/errors.py``), and a
site's views can catch it the same way.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError

from .encoder.exceptions import (
    ModelNotFoundError,
    OnnxUnavailable,
    PackageError,
    SbertError,
    TrainingCancelled,
    UnsupportedModelError,
)

__all__ = [
    "AlreadyRegistered",
    "BrokerUnavailable",
    "CompareError",
    "EncoderAway",
    "EncoderBusy",
    "EvaluationError",
    "EventRefused",
    "InvalidToken",
    "JudgmentsImportError",
    "ManifestError",
    "MissingAPIDependencies",
    "ModelNotFoundError",
    "NotRegistered",
    "OnnxUnavailable",
    "PackageError",
    "PairsImportError",
    "PromotionRefused",
    "RollbackForbidden",
    "RunConflict",
    "SbertError",
    "SearchTimeout",
    "ServiceUnavailable",
    "TrainingCancelled",
    "UnsupportedModelError",
    "UnversionedVector",
    "VersionUnavailable",
]


class ServiceUnavailable(SbertError):
    """Something the request needs is unavailable now; the message says what and where."""


class BrokerUnavailable(ServiceUnavailable):
    """The Celery broker could not be reached to queue a task; nothing was left queued."""


class VersionUnavailable(ServiceUnavailable):
    """The encoder version the database says is serving cannot be loaded on this host.

    Raised instead of encoding with another version: vectors of two versions must never meet
    in one search or one table.
    """


class EncoderBusy(ServiceUnavailable):
    """This host's query server has as many texts waiting as it holds (``sbert_query_server
    --max-queue``); the search was refused at once rather than queued behind them.

    ``retry_after`` is the seconds a client should wait (the API's ``Retry-After``).
    """

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EncoderAway(ServiceUnavailable):
    """This host's query server does not answer (not listening, a broken connection, past its
    timeout, or it could not encode the text), and this process loads no model to encode the
    text itself (``SBERT["QUERY_SERVER"]["SOCKET"]`` a path: the light layout).

    The REST API's search/ and ``SearchView`` answer such a search from the keyword side,
    marked ``degraded``; where the model has no full-text column, a 503 with ``Retry-After``
    (``retry_after``: the seconds before this process asks the server again).
    """

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SearchTimeout(OperationalError, ServiceUnavailable):
    """PostgreSQL cancelled a search statement at ``SBERT["SEARCH"]["STATEMENT_TIMEOUT"]``.

    ``seconds`` is the timeout that was in force.
    """

    def __init__(self, message: str, seconds: float | None = None) -> None:
        super().__init__(message)
        self.seconds = seconds


# --- models and their files --------------------------------------------------------------------


class UnversionedVector(SbertError, ValueError):
    """A row's stored vector has no encoder version (written outside django-sbert), so it
    cannot be searched with: the rows it would be compared with are of one version each.

    The sweep re-embeds such a row (its version is not the serving one).
    """


class ManifestError(SbertError):
    """A version's manifest is missing or malformed; the message says which and where."""


# --- fine-tuning -------------------------------------------------------------------------------


class PairsImportError(SbertError, ValueError):
    """The import as a whole cannot go ahead (a file too large or not UTF-8, a source that
    does not fit its column); nothing was saved. The message says what to do."""


class EvaluationError(SbertError, ValueError):
    """A judgment list that cannot be measured as asked: an unknown mode or version, a field
    that is gone, no query graded 1 or more. The message says what to change."""


class JudgmentsImportError(SbertError, ValueError):
    """A judgments file (or the eval pairs) cannot be imported as a whole: not UTF-8, too
    large, a queries file that cannot be read, no pair that matches a row. Nothing was saved;
    the message says what to do."""


class RunConflict(SbertError):
    """Another run of the same encoder is queued or running."""


class CompareError(SbertError):
    """The two versions cannot be compared now; the message says why and what to do."""


class PromotionRefused(SbertError):
    """``start_promotion`` will not promote: the gate failed or the state does not allow it."""


class RollbackForbidden(PromotionRefused):
    """The rollback target was put in service by a forced promotion: only a superuser may
    return to it (rolling back would otherwise pass the gate for staff who could not)."""


# --- the search log ----------------------------------------------------------------------------


class InvalidToken(SbertError, ValueError):
    """A click token that was edited, forged, expired or malformed; the message says which."""


class EventRefused(SbertError):
    """An event that is not stored; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# --- the REST API ------------------------------------------------------------------------------


class MissingAPIDependencies(SbertError, ImproperlyConfigured, ImportError):
    """The REST API was imported on a site installed without the ``api`` extra.

    Also an ``ImportError``, so ``try: from django_sbert import api`` still works as a probe.
    """


class AlreadyRegistered(SbertError, ImproperlyConfigured):
    """The model is registered already; ``unregister()`` it first to change its options."""


class NotRegistered(SbertError, LookupError):
    """The label names no registered model.

    The message lists the registered labels, for the developer reading a traceback; the API
    views tell clients only that ``label`` is unknown (the list goes to staff and the log).
    """

    def __init__(self, message: str, label: object = None) -> None:
        super().__init__(message)
        self.label = label
