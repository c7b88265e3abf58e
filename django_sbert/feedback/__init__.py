"""Learning from visitors: the search log, click and conversion events, export, retention.

Turned on by ``SBERT["FEEDBACK"]["LOG"]`` (docs/learning.md). The query and API wings call in
here; nothing here imports them::

    log_search(request, hits, query=q, mode="hybrid")  # one logged search (or None)
    record_event(request, token, "click")              # one event on a logged result
    forget_user(user); purge_expired()                 # privacy and retention

Modules: ``log`` (``log_search``, ``normalize_query``), ``visitors`` (pseudonymous client and
network keys, crawlers, budgets), ``tokens`` (signed click tokens), ``events``
(``record_event``), ``export`` (UBI JSON lines), ``retention`` (purge and forget), ``tasks``
(the purge task), ``writes`` (the one write); and what is learned from them: ``analytics``
(figures of the log), ``clicks`` (the log's clicks read for pairs), ``pairs`` (training pairs
from clicks), ``evidence`` (what those pairs rest on), ``clickmodel`` (which clicked rows
visitors wanted), ``loop`` (clicks to a promoted fine-tune) and ``learning_tasks`` (the loop's
Celery task).
"""

from __future__ import annotations

from ..exceptions import EventRefused, InvalidToken
from .events import allowed_kinds, record_event
from .log import log_search, logging_on, normalize_query, write_after_response
from .retention import Deleted, forget_client, forget_session, forget_user, purge_expired
from .tokens import make_token, read_token
from .visitors import client_key, client_key_for_session, client_key_for_user, network_key

__all__ = [
    "Deleted",
    "EventRefused",
    "InvalidToken",
    "allowed_kinds",
    "client_key",
    "client_key_for_session",
    "client_key_for_user",
    "forget_client",
    "forget_session",
    "forget_user",
    "log_search",
    "logging_on",
    "make_token",
    "network_key",
    "normalize_query",
    "purge_expired",
    "read_token",
    "record_event",
    "write_after_response",
]
