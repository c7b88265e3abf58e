"""A web process's side of the host's query server (``query_server``): ask it for a query's
vector; when it is away, say so.

``encode_query_for`` (``serving.cache``) calls ``remote_query_vector`` after a miss in the
process's own cache, when ``SBERT["QUERY_SERVER"]["SOCKET"]`` is set::

    vector = remote_query_vector(text, current)   # (dim,) float32, or None: encode it here

Each thread keeps one connection. A server that does not listen, breaks the connection or
takes longer than ``TIMEOUT`` is away for ``RETRY_SECONDS``, then asked again. What a search
does meanwhile is the layout's choice (``layout()``):

* ``SOCKET`` a path (the light layout): this process loads no model. The search's text gets
  ``EncoderAway`` at once, and the search pages and the REST API answer from the keyword side,
  marked ``degraded`` (``note_degraded()`` counts them for the health view).
* ``SOCKET`` ``[path, "in-process"]``: the process encodes the text itself (loading the model
  the first time), as every process did before the light layout.

A server that is busy is not away: the search is refused with ``EncoderBusy`` (a 503 with
``Retry-After``), as encoding here too would add load to a host that has none to spare.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
from typing import NoReturn

import numpy as np

from ..conf import sbert_settings
from ..exceptions import EncoderAway, EncoderBusy
from .versions import Serving

logger = logging.getLogger(__name__)

# The wire format (query_server has the other side): a request is a 4-byte big-endian length
# and that many bytes of JSON; an answer is a status byte, a 4-byte length and the payload.
HEADER = struct.Struct(">I")
ANSWER = struct.Struct(">BI")
OK, BUSY, ERROR = 0, 1, 2

# Seconds a web process waits for the server's answer before encoding the text itself, and
# how long, after finding the server away, it encodes texts itself before asking again.
TIMEOUT = 2.0
RETRY_SECONDS = 5.0
_local = threading.local()
_away_until = 0.0  # time.monotonic() before which this process does not ask the server
_disabled = False  # set in the server's own process: it never asks itself
_in_process = False  # set in processes that encode anyway (Celery workers): encode when away
_away_reason = ""  # why the server was last found away ("": it answered since)
_degraded = 0  # searches this process answered from the keyword side (the health view)

IN_PROCESS = "in-process"  # SOCKET = [path, IN_PROCESS]: encode here while the server is away


def layout() -> tuple[str | None, bool]:
    """``(socket, encodes_here)``: the query server's socket (None: this process encodes its
    texts itself) and whether this process encodes a text itself while the server is away.
    ``encodes_here`` False is the light layout: the process never loads a model."""
    value = sbert_settings.QUERY_SERVER["SOCKET"]
    if _disabled or not value:
        return None, True
    if isinstance(value, list | tuple):
        return os.fspath(value[0]), True
    return os.fspath(value), _in_process


def light() -> bool:
    """Whether this process loads no model: it asks the query server and, while the server is
    away, searches answer from the keyword side (``SOCKET`` a path)."""
    path, encodes_here = layout()
    return path is not None and not encodes_here


def remote_query_vector(text: str, current: Serving) -> np.ndarray | None:
    """The query server's vector for ``text`` in version ``current`` (read-only, float32), or
    None when no server is configured, or it is away and this process encodes texts itself.
    Raises ``EncoderBusy`` when it is full, and ``EncoderAway`` when it is away (or could not
    encode the text) in the light layout."""
    global _away_until, _away_reason
    path, encodes_here = layout()
    if path is None:
        return None
    if time.monotonic() < _away_until:
        return None if encodes_here else _away(path, f"away: {_away_reason}")
    request = json.dumps(
        {
            "encoder": current.encoder,
            "version": current.version,
            "directory": current.directory,
            "text": text,
        }
    ).encode()
    try:
        status, payload = _ask(os.fspath(path), request, TIMEOUT)
    except (OSError, ValueError) as exc:  # not listening, a broken connection, a timeout
        _away_until = time.monotonic() + RETRY_SECONDS
        _away_reason = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "django-sbert: the query server at %s is away (%s); %s for %g s.",
            path,
            _away_reason,
            "this process encodes search texts itself"
            if encodes_here
            else "searches answer from the keyword side",
            RETRY_SECONDS,
        )
        return None if encodes_here else _away(path, f"away: {_away_reason}")
    if status == OK:
        _away_reason = ""
        vector = np.frombuffer(payload, dtype=np.float32)
        vector.flags.writeable = False  # shared with later callers through the process cache
        return vector
    if status == BUSY:
        raise EncoderBusy(
            f"The query server at {path} has as many texts waiting as it holds "
            "(sbert_query_server --max-queue); search refused for now.",
            retry_after=int(payload.decode() or 1),
        )
    # The server could not encode it (a version it cannot load, say): encoding here gives
    # the same answer or raises the real error where the search can report it.
    logger.warning("django-sbert: the query server at %s answered: %s", path, payload.decode())
    return None if encodes_here else _away(path, f"it answered: {payload.decode()}")


def _away(path: str, reason: str) -> NoReturn:
    raise EncoderAway(
        f"The query server at {path} gave no vector ({reason}) and this process loads no model "
        f'(SBERT["QUERY_SERVER"]["SOCKET"] is a path): start manage.py sbert_query_server, '
        f'or set SOCKET to [path, "in-process"] to encode here while it is away.',
        retry_after=max(1, round(RETRY_SECONDS)),
    )


def note_degraded() -> None:
    """Count a search this process answered from the keyword side (the encoder away)."""
    global _degraded
    _degraded += 1


def encoding_report() -> dict[str, object]:
    """How this process encodes search texts, for the health view: ``layout`` ("in-process",
    "query server" or "query server, in-process while away"), the socket, whether the server
    was away at the last ask (and why; "ok" before the first), and the searches this process
    answered from the keyword side."""
    path, encodes_here = layout()
    if path is None:
        return {"layout": "in-process"}
    return {
        "layout": "query server, in-process while away" if encodes_here else "query server",
        "socket": path,
        "query_server": f"away: {_away_reason}" if _away_reason else "ok",
        "degraded_searches": _degraded,
    }


def _ask(path: str, request: bytes, timeout: float) -> tuple[int, bytes]:
    """Send one request and read its answer on this thread's connection. A kept connection
    that fails (the server restarted since) is replaced once; a timeout is not retried."""
    connection = getattr(_local, "connection", None)
    if connection is not None:
        try:
            return exchange(connection, request)
        except TimeoutError:
            close_connection()
            raise
        except OSError:
            close_connection()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout)
    try:
        connection.connect(path)
    except OSError:
        connection.close()
        raise
    _local.connection = connection
    try:
        return exchange(connection, request)
    except OSError:
        close_connection()
        raise


def exchange(connection: socket.socket, request: bytes) -> tuple[int, bytes]:
    """Send one request on ``connection`` and read its answer: (status, payload)."""
    connection.sendall(HEADER.pack(len(request)) + request)
    status, length = ANSWER.unpack(_read(connection, ANSWER.size))
    return status, _read(connection, length)


def _read(connection: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = connection.recv(left)
        if not chunk:
            raise ConnectionResetError("the query server closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def close_connection() -> None:
    """Close this thread's connection to the server (the next request opens another)."""
    connection = getattr(_local, "connection", None)
    _local.connection = None
    if connection is not None:
        connection.close()


def forget_away() -> None:
    """Ask the server at the next search even if it was found away a moment ago (tests, and a
    process that knows the server is back)."""
    global _away_until
    _away_until = 0.0


def disable() -> None:
    """Never ask a server from this process (the query server's own process)."""
    global _disabled
    _disabled = True


def encode_here_when_away() -> None:
    """Encode texts in this process while the server is away, whatever ``SOCKET`` says (a
    Celery worker: it loads the model for its tasks anyway)."""
    global _in_process
    _in_process = True


def _reset_after_fork() -> None:
    # A connection opened before fork() would be shared by parent and child.
    global _local, _away_until, _away_reason, _degraded
    _local = threading.local()
    _away_until, _away_reason, _degraded = 0.0, "", 0


os.register_at_fork(after_in_child=_reset_after_fork)
