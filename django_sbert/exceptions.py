"""Exceptions for the parts a request needs that can be away: the broker, a model's files, time.

Each is a ``ServiceUnavailable``: the request was valid and may succeed later, and nothing was
left half done. The REST API answers all of them with 503 (``api/errors.py``); views of a site
can catch ``ServiceUnavailable`` the same way::

    try:
        results = list(Article.objects.similar_to(text)[:10])
    except ServiceUnavailable as exc:
        return render(request, "busy.html", {"reason": str(exc)}, status=503)

``query.SearchTimeout`` (a search statement ran past ``SBERT["SEARCH"]["STATEMENT_TIMEOUT"]``)
is one too.
"""

from __future__ import annotations


class ServiceUnavailable(Exception):
    """Something the request needs is unavailable now; the message says what and where."""


class BrokerUnavailable(ServiceUnavailable):
    """The Celery broker could not be reached to queue a task; nothing was left queued."""


class VersionUnavailable(ServiceUnavailable):
    """The encoder version the database says is serving cannot be loaded on this host.

    Raised instead of encoding with another version: vectors of two versions must never meet
    in one search or one table.
    """
