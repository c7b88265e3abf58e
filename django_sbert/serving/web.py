"""Per-process setup of web processes: torch threads, encoders warmed before the first request,
and new versions warmed off the request path.

A web server calls ``prepare_web_process()`` once in each worker process, after the
application loaded and before it takes requests (``django_sbert.contrib.gunicorn`` does it
from gunicorn's ``post_worker_init``)::

    prepare_web_process(processes=2)   # threads, warm(["default"], role="query"), the watcher

The watcher is a daemon thread that keeps what this process warmed in step with the database
without a request paying for it: it loads a version being promoted before the switch, and
warms again once the serving version changed (the health view answers 503 only in that gap).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence

from django.db import close_old_connections

from ..conf import sbert_settings
from ..fields import all_embedding_fields
from .cache import encode_texts, get_encoder
from .query_client import light
from .versions import promoting_version, serving_record
from .warmup import WARM_TEXTS, WarmRole, WarmState, compile_batches_for, warm, warm_state
from .worker import set_torch_threads, torch_threads

logger = logging.getLogger(__name__)

WATCH_SECONDS = 0.5  # how often the watcher compares the serving version with the warmed one
RETRY_SECONDS = 5.0  # how long it waits before warming again a version that failed to warm

_lock = threading.Lock()
_watcher: threading.Thread | None = None
_prewarmed: set[tuple[str, str]] = set()


def served_encoders() -> list[str]:
    """The encoder names some ``EmbeddingField`` of an installed model uses, sorted."""
    return sorted({field.encoder for _, field in all_embedding_fields()})


def prepare_web_process(
    names: Sequence[str] | None = None,
    *,
    processes: int = 1,
    role: WarmRole = "query",
    watch: bool = True,
) -> dict[str, WarmState]:
    """Set torch threads for one of ``processes`` web processes, warm the encoders, start the
    watcher. Returns what ``warm()`` did; a failure is in the states, never raised (the health
    view reports it and requests that need the encoder get the error)."""
    names = list(names) if names is not None else served_encoders()
    if not names:
        return {}
    threads = torch_threads(names[0], processes)
    set_torch_threads(threads)
    if not (role == "query" and light()):  # light: the query server encodes, no torch here
        import torch  # a web process encodes queries: torch is loaded here, after fork

        torch.set_num_threads(threads)
    states = warm(names, role=role)
    if watch:
        start_watcher(names, role)
    logger.info(
        "django-sbert: web process warmed %s with %d torch threads: %s.",
        names,
        threads,
        {name: state.error or state.version for name, state in states.items()},
    )
    return states


def start_watcher(names: Iterable[str], role: WarmRole = "query") -> threading.Thread:
    """Start this process's version watcher (once; later calls return the running one)."""
    global _watcher
    with _lock:
        if _watcher is None or not _watcher.is_alive():
            _watcher = threading.Thread(
                target=_watch, args=(list(names), role), name="django-sbert-watcher", daemon=True
            )
            _watcher.start()
        return _watcher


def _watch(names: list[str], role: WarmRole) -> None:
    next_promotion_check = 0.0
    while True:
        time.sleep(WATCH_SECONDS)
        check_promotions = time.monotonic() >= next_promotion_check
        if check_promotions:
            next_promotion_check = time.monotonic() + float(sbert_settings.VERSION_CACHE_SECONDS)
        for name in names:
            try:
                if check_promotions:
                    _prewarm_promotion(name, role)
                _rewarm_if_switched(name, role)
            except Exception:  # the database may be away: try again at the next tick
                logger.warning("django-sbert: version watcher of %r failed.", name, exc_info=True)
        close_old_connections()  # this thread's connection obeys CONN_MAX_AGE like a request's


def _prewarm_promotion(name: str, role: WarmRole) -> None:
    """Load and run the version being promoted, once, so that the switch finds it warm."""
    if role == "query" and light():  # the query server loads versions, not this process
        return
    version = promoting_version(name)
    if version is None or (name, version) in _prewarmed:
        return
    _prewarmed.add((name, version))  # tried once per version: a failure is logged, not retried
    started = time.perf_counter()
    try:
        compile_batches_for(get_encoder(name, version), role)
        if role in ("query", "both"):
            encode_texts(WARM_TEXTS[:1], name, version, role="query")
        if role in ("document", "both"):
            encode_texts(WARM_TEXTS, name, version, role="document")
    except Exception:
        logger.warning("django-sbert: could not pre-load version %s.", version, exc_info=True)
        return
    logger.info(
        "django-sbert: pre-loaded version %s being promoted in %.1f s.",
        version,
        time.perf_counter() - started,
    )


def _rewarm_if_switched(name: str, role: WarmRole) -> None:
    current = serving_record(name)
    state = warm_state().get(name)
    caught_up = state is not None and state.version == current.version
    if caught_up and (state.error is None or time.time() - state.warmed_at < RETRY_SECONDS):
        return  # warm, or failed a moment ago: retried every RETRY_SECONDS
    warm([name], role=role)
