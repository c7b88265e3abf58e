"""Logging one search: ``log_search(request, results, query=..., mode=...)``.

Called by the REST API's ``search/``, by ``SearchView`` and by a site's own views. With
``SBERT["FEEDBACK"]["LOG"]`` off it returns at its first line; on, it writes one row
(``SearchLog``: one ``INSERT``, the first page of results as JSON in it) and gives each result
its click token. A search is left out when sampled out (``LOG`` a share below 1), from a crawler
(``BOT_USER_AGENTS``) or past its client's ``RATES["logging"]``; the search itself is served either
way, and a database error while logging is reported in the log, never to the visitor.

The REST API's ``search/`` and ``SearchView`` write the row after the response has gone to
the visitor (``defer=True``, then ``write_after_response``): the server calls the response's
``close()`` once the body is sent, and the INSERT runs there, so the search's answer never
waits for it. A click that arrives before that INSERT (within a millisecond or so) is held
briefly by the event endpoint until the search is in the log (``events.record_event``).
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import DatabaseError, models, router
from django.utils.crypto import salted_hmac

from ..conf import sbert_settings
from ..models import SearchLog
from ..serving import serving_record
from .tokens import make_token
from .visitors import client_key, is_bot, network_key, over_rate
from .writes import insert_params, insert_sql, write

logger = logging.getLogger(__name__)

MODES = ("vector", "keyword", "hybrid", "passages")
MAX_QUERY_LENGTH = 200  # characters of a query text kept in the log; the rest is cut
TOKEN_ATTRIBUTE = "sbert_click_token"  # on each logged result: what {% sbert_click_attrs %} reads
# The score a result of each mode carries (the attribute its search annotates).
SCORES = {
    "vector": "similarity",
    "passages": "similarity",
    "hybrid": "score",
    "keyword": "keyword_score",
}


def normalize_query(text: str) -> str:
    """``text`` lower-cased with its whitespace collapsed: what searches are grouped by."""
    return " ".join(str(text).lower().split())


def logging_on() -> bool:
    """Whether searches are logged at all (``SBERT["FEEDBACK"]["LOG"]``)."""
    return sbert_settings.FEEDBACK["LOG"] is not False  # True, or the share of searches logged


FILTERS_DIGEST_SALT = "django_sbert.feedback.filters_digest"


def filters_digest(filters: Mapping[str, Any] | str | None) -> str:
    """An HMAC-SHA256 of the filters a search ran with (``""`` for none), keyed by
    ``SECRET_KEY`` (``salted_hmac``): searches with the same filters share it, and a reader of
    the log without the key cannot test a guess of the values (an unkeyed hash of
    ``{"category": ["c3"]}`` falls to one guess)."""
    if not filters:
        return ""
    if not isinstance(filters, str):
        filters = json.dumps(
            {str(k): filters[k] for k in sorted(filters, key=str)}, sort_keys=True, default=str
        )
    value = filters.encode("utf-8", "surrogatepass")
    return salted_hmac(FILTERS_DIGEST_SALT, value, algorithm="sha256").hexdigest()


def _value(hit: Any, name: str) -> Any:
    return hit.get(name) if isinstance(hit, Mapping) else getattr(hit, name, None)


def _pk(hit: Any) -> Any:
    if isinstance(hit, Mapping):
        return hit.get("pk", hit.get("id"))
    return hit.pk


def _score(hit: Any, mode: str) -> float | None:
    value = _value(hit, SCORES.get(mode, "similarity"))
    try:
        return None if value is None else round(float(value), 6)
    except (TypeError, ValueError):
        return None


def _label(model: Any, results: Sequence[Any]) -> str:
    if isinstance(model, str):
        return model
    if model is None and results and isinstance(results[0], models.Model):
        model = type(results[0])
    return model._meta.label if model is not None else ""


def _should_log(request: Any) -> bool:
    share = sbert_settings.FEEDBACK["LOG"]  # True: every search; a number: that share
    rate = 1.0 if share is True else float(share)
    if rate < 1.0 and random.random() >= rate:
        return False
    if is_bot(request):
        return False
    return not over_rate(request, "logging")


def log_search(
    request: Any,
    results: Sequence[Any],
    *,
    query: str,
    mode: str = "vector",
    model: type[models.Model] | str | None = None,
    field: str = "",
    filters: Mapping[str, Any] | str | None = None,
    encoder: str = "default",
    version: str | None = None,
    latency_ms: float | None = None,
    using: str | None = None,
    defer: bool = False,
    degraded: str = "",
) -> SearchLog | None:
    """Log a search whose first page is ``results`` (model instances or ``values()`` dicts,
    best first) and give each a click token (``hit.sbert_click_token``); the ``SearchLog``,
    or None when the search is not logged.

    ``mode``: vector, keyword, hybrid or passages. ``model``: the model searched (a class or
    "app_label.ModelName"; default the results'). ``filters``: what the search was filtered
    by (stored as a digest). ``version``: the encoder version that served (default the one
    serving ``encoder`` now on ``using``; none for keyword searches). ``latency_ms``: how
    long the search took. ``defer=True`` keeps the INSERT on ``request`` until
    ``write_after_response(request, response)`` runs it once the response is sent; the
    results get their tokens now either way. ``degraded="keyword"``: the search asked for
    ``mode`` but the encoder was away, so the results came from the keyword side (their
    scores are ``keyword_score``; no version served).
    """
    if not logging_on():
        return None  # off: nothing read, nothing written
    if mode not in MODES:
        raise ValueError(f"log_search(mode={mode!r}): use one of {', '.join(MODES)}.")
    if not _should_log(request):
        return None
    results = list(results)
    search_id = uuid.uuid4()
    text = str(query)[:MAX_QUERY_LENGTH]
    if degraded:
        version = ""  # no encoder served the search
    elif version is None:
        version = "" if mode == "keyword" else serving_record(encoder, using=using).version
    scored = degraded or mode
    shown = [
        [str(_pk(hit)), position, _score(hit, scored)] for position, hit in enumerate(results, 1)
    ]
    entry = SearchLog(
        id=search_id,
        query=text,
        normalized=normalize_query(text),
        mode=mode,
        model_label=_label(model, results),
        field=field or "",
        filters_digest=filters_digest(filters),
        encoder_name=encoder,
        version=version or "",
        results=shown,
        result_count=len(shown),
        client=client_key(request, search_id),
        network=network_key(request),
        latency_ms=None if latency_ms is None else round(float(latency_ms), 3),
        degraded=degraded,
    )
    if defer:
        request.__dict__.setdefault(_DEFERRED, []).append(entry)
    elif not _insert(entry):
        return None
    entry.click_tokens = [  # type: ignore[attr-defined]
        make_token(search_id, pk, position) for pk, position, _ in shown
    ]
    for hit, token in zip(results, entry.click_tokens, strict=True):
        if isinstance(hit, dict):
            hit[TOKEN_ATTRIBUTE] = token
        else:
            setattr(hit, TOKEN_ATTRIBUTE, token)
    return entry


_DEFERRED = "_sbert_deferred_logs"  # on the request: the entries log_search(defer=True) kept


def write_after_response(request: Any, response: Any) -> Any:
    """Write the searches ``log_search(request, ..., defer=True)`` kept once ``response`` is
    sent: its ``close()``, which the WSGI or ASGI server calls after the body, inserts them
    first. Entries kept when there is no response to close (an error) are written now."""
    entries = request.__dict__.pop(_DEFERRED, None)
    if not entries:
        return response
    if response is None or not hasattr(response, "close"):
        for entry in entries:
            _insert(entry)
        return response
    close = response.close

    def insert_then_close() -> None:
        try:
            for entry in entries:
                _insert(entry)
        finally:
            close()  # Django's own close: request_finished, then old connections closed

    response.close = insert_then_close
    return response


def _insert(entry: SearchLog) -> bool:
    """One INSERT (no ``save()``: no model signals for a log row); False (and a warning)
    when the database refuses it. Inside a transaction (ATOMIC_REQUESTS) it gets a savepoint,
    so a failure cannot break the request's own work."""
    database = router.db_for_write(SearchLog)
    try:
        write(database, insert_sql(SearchLog, database), insert_params(entry, database))
    except DatabaseError as exc:
        logger.warning("django-sbert: a search could not be logged: %s", exc)
        return False
    return True
