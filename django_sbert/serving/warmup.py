"""Load and warm this process's serving encoders before it takes traffic.

The first forward pass of a process pays for kernel selection, memory pools and (with
``COMPILE``) building the compiled graph; none of that should land on a user's query or on the
first task of a worker. A process calls ``warm()`` once at start-up (a Celery worker process in
``serving.worker``; a web process from its server's start-up hook), and a readiness check asks
``warm_state()`` whether the version that serves now is the one this process warmed::

    warm(["default"], role="query")     # web process: the single-query path
    warm(["default"], role="document")  # encoding worker: the batch path
    warm_state()["default"].version     # which version this process warmed, and when

``role`` says which shapes to run: one text (``"query"``), a batch of two (``"document"``), or
``"both"``; with the compiled path these passes build the graphs (``encoder/compiled.py``), so
no request or task waits for a compile. A process warmed for queries alone (a web process)
encodes its few batches (a search page's highlighted sentences, the embed API) in eager mode:
a frozen batch graph would be built on the first such request, seconds to tens of seconds, and
again after each promotion, for batches of a page's size that compiling speeds up little.
``WarmState.path`` and ``reason`` say which path each encoder took and why (``serving.paths``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..exceptions import EncoderAway
from .cache import encode_query_for, encode_texts, encoder_for
from .paths import encoder_path
from .query_client import layout, light
from .versions import Serving, serving_record

if TYPE_CHECKING:
    from ..encoder import SentenceEncoder

logger = logging.getLogger(__name__)

WarmRole = Literal["query", "document", "both"]

WARM_TEXTS = ("warm up", "a batch of two texts")


@dataclass(frozen=True)
class WarmState:
    """What ``warm()`` did for one encoder name in this process."""

    encoder: str
    version: str  # the version warmed (the serving one when warm() ran)
    role: WarmRole
    seconds: float  # how long loading and the warm-up passes took
    warmed_at: float  # time.time() when it finished
    error: str | None = None  # why it failed; None when the encoder is warm
    path: str = ""  # the inference path it runs: "compiled float32", "eager int8"...
    reason: str = ""  # why that path (serving.paths), and a failed compile's cause if any


_lock = threading.Lock()
_state: dict[str, WarmState] = {}


def warm(names: Iterable[str], role: WarmRole = "both") -> dict[str, WarmState]:
    """Load the serving version of each encoder and run the forward passes of ``role``.

    Never raises for a broken encoder: the failure is logged and kept in ``warm_state()`` (a
    readiness check reports it; a request that needs the encoder gets the error itself).
    """
    results: dict[str, WarmState] = {}
    for name in names:
        started = time.perf_counter()
        version = path = reason = ""
        error: str | None = None
        try:
            current = serving_record(name)
            version = current.version
            if role == "query" and light():  # the query server encodes: nothing to load here
                path, reason = _ask_server(current)
                results[name] = _keep(name, version, role, started, None, path, reason)
                continue
            model = encoder_for(current)  # load once, before the passes below time anything
            compile_batches_for(model, role)
            if role in ("query", "both"):
                encode_texts(WARM_TEXTS[:1], name, version, role="query")
            if role in ("document", "both"):
                encode_texts(WARM_TEXTS, name, version, role="document")
            path, reason = _path_taken(name, role, model)
        except Exception as exc:  # reported, not raised: see the docstring
            error = f"{type(exc).__name__}: {exc}"
            logger.exception("django-sbert: could not warm encoder %r.", name)
        results[name] = _keep(name, version, role, started, error, path, reason)
    return results


def compile_batches_for(model: SentenceEncoder, role: WarmRole) -> None:
    """Whether ``model`` compiles its batches in a process warmed for ``role``: not in one
    that encodes queries alone (the module docstring says why); single texts keep their
    compiled graph either way."""
    model.compile_batches = role != "query"


def _keep(
    name: str,
    version: str,
    role: WarmRole,
    started: float,
    error: str | None,
    path: str,
    reason: str,
) -> WarmState:
    state = WarmState(
        encoder=name,
        version=version,
        role=role,
        seconds=time.perf_counter() - started,
        warmed_at=time.time(),
        error=error,
        path=path,
        reason=reason,
    )
    with _lock:
        _state[name] = state
    return state


def _ask_server(current: Serving) -> tuple[str, str]:
    """A light web process's warm-up: one text through the host's query server (the server
    away is no failure here: searches answer from the keyword side until it is back)."""
    socket, _ = layout()
    reason = f"QUERY_SERVER SOCKET {socket}: this process loads no model"
    try:
        encode_query_for(WARM_TEXTS[0], current)
    except EncoderAway:
        reason += "; the server was away at warm-up"
    return "query server", reason


def _path_taken(name: str, role: WarmRole, model: SentenceEncoder) -> tuple[str, str]:
    """The path the warmed encoder runs, and why: the chosen one, unless compiling failed."""
    chosen = encoder_path(name, role)
    failure = model.compile_failure
    if chosen.compile and failure:
        return f"eager {chosen.dtype}", f"torch.compile failed, so eager: {failure}"
    if model.query_runtime_failure:
        return (
            chosen.label,
            f"{chosen.reason}; but ONNX Runtime failed: {model.query_runtime_failure}",
        )
    return chosen.label, chosen.reason


def warm_state() -> dict[str, WarmState]:
    """What ``warm()`` last did for each encoder name in this process (empty: never ran)."""
    with _lock:
        return dict(_state)


def forget_warm_state() -> None:
    """Forget what was warmed (tests; after ``fork()`` a child must warm its own encoders)."""
    with _lock:
        _state.clear()


def _reset_after_fork() -> None:
    # A child warms its own encoders; the parent's lock may have been held at fork time.
    global _lock
    _lock = threading.Lock()
    _state.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
