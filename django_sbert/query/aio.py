"""The async searches' query text: encoded off the event loop, in a small pool of threads.

::

    rows = await Article.objects.asimilar_to("central banks raise rates", k=5)
    async for article in rows: ...

``asimilar_to()`` and ``ahybrid_search()`` (queryset.py) call ``encode_text()`` first: it reads
the serving version through ``sync_to_async`` (Django's thread for database work, cached for
``VERSION_CACHE_SECONDS``), then encodes the text in ``ENCODE_THREADS`` dedicated threads and
returns it as an ``EncodedText``, a ``str`` carrying its vector and version, which
``similar_to()`` and ``hybrid_search()`` take as the text already encoded.

Why a dedicated pool rather than ``sync_to_async``, and why its queue is bounded
(``ENCODE_QUEUE``: past it a search is refused at once with ``ServiceUnavailable``):
docs/search.md ("Async views"). Nothing in the pool reads the database
(``serving.encode_query_for``), so no connection is opened outside Django's threads.

A text search built in async code without these (``similar_to(text)`` on the event loop) would
block the loop while it encodes: the synchronous encode (``vectors.text_vector``) refuses with
``SynchronousOnlyOperation``, as Django does for queries (``DJANGO_ALLOW_ASYNC_UNSAFE`` lifts
both).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async

from ..exceptions import ServiceUnavailable
from ..serving import encode_query_for, peek_query_cache, serving_record
from ..serving.cache import encodes_outside_gil
from .vectors import EncodedText, refuse_in_event_loop

# Threads that encode query texts for async searches, per process. Each encoder runs one
# forward pass at a time (its lock), so more threads would only wait on that lock.
ENCODE_THREADS = 2
# Encodes waiting for those threads, per process, beyond which a search is refused (503):
# about a second of one-sentence queries on two CPU cores, far more than a client should wait
# for while a model loads.
ENCODE_QUEUE = 64

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_in_flight = 0  # encodes submitted to the pool and not yet done (running or waiting)


def encoding_pool() -> ThreadPoolExecutor:
    """The process's pool of ``ENCODE_THREADS`` query-encoding threads, made on first use."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="sbert-query")
    return _pool


async def encode_text(text: str, encoder: str, using: str | None = None) -> str:
    """``text`` as an ``EncodedText`` of ``encoder``'s serving version on database ``using``
    (the search's), encoded off the event loop; a blank text or one encoded already is
    returned as it is."""
    if isinstance(text, EncodedText) and text.encoder == encoder:
        return text
    if not isinstance(text, str) or not text.strip():
        return text  # nothing to encode; the search says what is wrong with it, if anything
    text = str(text)
    # A cached read; the database at most every 2 s.
    current = await sync_to_async(serving_record)(encoder, using=using)
    vector = peek_query_cache(text, current)  # never waits: the loop must not block
    if vector is None:
        future = _submit(partial(encode_query_for, text, current))
        vector = await asyncio.wrap_future(future)
    return EncodedText(text, encoder, vector, current.version)


def _submit(encode: Callable[[], np.ndarray]) -> Future[np.ndarray]:
    """Queue ``encode`` in the pool, or refuse with ``ServiceUnavailable`` when
    ``ENCODE_THREADS + ENCODE_QUEUE`` encodes are already running or waiting."""
    global _in_flight
    with _pool_lock:
        if _in_flight >= ENCODE_THREADS + ENCODE_QUEUE:
            raise ServiceUnavailable(
                f"This process has {_in_flight} query texts waiting to be encoded already "
                f"(django_sbert.query.aio.ENCODE_QUEUE = {ENCODE_QUEUE}); try again shortly."
            )
        _in_flight += 1
    try:
        future = encoding_pool().submit(encode)
    except BaseException:
        _done(None)
        raise
    future.add_done_callback(_done)  # also when the awaiting search went away meanwhile
    return future


def _done(future: Future[np.ndarray] | None) -> None:
    global _in_flight
    with _pool_lock:
        _in_flight -= 1


def encodes_in_flight() -> int:
    """Query encodes queued in or running on this process's pool now (for status and tests)."""
    return _in_flight


class PendingVector:
    """A query text's vector of one serving version, to be encoded while the caller queries
    the database (``hybrid_search()`` ranks its keyword side): in the pool once ``start()``
    is called, or in the caller's thread by ``encode_meanwhile()``. ``result()`` returns it:
    the pool's answer, or, when never started or no pool thread was free, encoded here."""

    def __init__(
        self, text: str, version: str, current: Any = None, ready: np.ndarray | None = None
    ) -> None:
        self.version = version
        self._text, self._current, self._ready = text, current, ready
        self._future: Future[np.ndarray] | None = None

    @property
    def waits_outside_gil(self) -> bool:
        """Whether the encode would leave the caller's Python alone (``encodes_outside_gil``):
        then it is worth starting before any of the caller's work."""
        return self._ready is None and encodes_outside_gil(self._current)

    def start(self) -> None:
        """Start encoding in the pool (once; nothing when ready or no thread is free)."""
        if self._ready is not None or self._future is not None:
            return
        with _pool_lock:
            if _in_flight >= ENCODE_THREADS:
                return  # no thread free: encoding in result() is as quick
        self._future = _submit(partial(encode_query_for, self._text, self._current))

    def encode_meanwhile(self) -> None:
        """Encode here and now, unless started or ready: the caller's statement runs on the
        server meanwhile (pipeline mode). A failure is left for ``result()`` to raise, outside
        the caller's statement."""
        if self._ready is None and self._future is None:
            with contextlib.suppress(Exception):
                self._ready = encode_query_for(self._text, self._current)

    def result(self) -> np.ndarray:
        if self._ready is None:
            if self._future is not None:
                self._ready = self._future.result()
            else:
                self._ready = encode_query_for(self._text, self._current)
        return self._ready


def pending_text_vector(text: str, encoder: str, using: str | None = None) -> PendingVector:
    """``text``'s vector of the version serving ``encoder`` on database ``using``, not yet
    encoded: ``encode_meanwhile()`` while a statement sent in pipeline mode runs, else
    ``start()`` it in the pool just before the caller's database work, so that a torch encode
    does not wait on the caller's Python for the GIL (and the other way round); one that
    ``waits_outside_gil`` is worth starting at once. A cached text or an ``EncodedText`` are
    ready at once."""
    if isinstance(text, EncodedText) and text.encoder == encoder:
        return PendingVector(str(text), text.version, ready=text.vector)
    refuse_in_event_loop()
    text = str(text)
    current = serving_record(encoder, using=using)
    return PendingVector(text, current.version, current, peek_query_cache(text, current))


def _forget_pool_after_fork() -> None:
    # A forked child has none of its parent's threads: it makes its own pool on first use.
    global _pool, _pool_lock, _in_flight
    _pool = None
    _pool_lock = threading.Lock()
    _in_flight = 0


os.register_at_fork(after_in_child=_forget_pool_after_fork)
