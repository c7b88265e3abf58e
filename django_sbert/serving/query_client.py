"""A web process's side of the host's query server (``query_server``): ask it for a query's
vector, or say it is away so the process encodes the text itself.

``encode_query_for`` (``serving.cache``) calls ``remote_query_vector`` after a miss in the
process's own cache, when ``SBERT["QUERY_SERVER"]["SOCKET"]`` is set::

    vector = remote_query_vector(text, current)   # (dim,) float32, or None: encode it here

Each thread keeps one connection. A server that does not listen, breaks the connection or
takes longer than ``TIMEOUT`` is away: the process encodes its searches itself for
``RETRY_SECONDS``, then asks again. A server that is busy is not away: the search is refused
with ``EncoderBusy`` (a 503 with ``Retry-After``), as encoding here too would add load to a
host that has none to spare.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time

import numpy as np

from ..conf import sbert_settings
from ..exceptions import EncoderBusy
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


def remote_query_vector(text: str, current: Serving) -> np.ndarray | None:
    """The query server's vector for ``text`` in version ``current`` (read-only, float32), or
    None when no server is configured or it is away. Raises ``EncoderBusy`` when it is full."""
    global _away_until
    config = sbert_settings.QUERY_SERVER
    path = config["SOCKET"]
    if not path or _disabled or time.monotonic() < _away_until:
        return None
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
        logger.warning(
            "django-sbert: the query server at %s is away (%s: %s); this process encodes "
            "search texts itself for %g s.",
            path,
            type(exc).__name__,
            exc,
            RETRY_SECONDS,
        )
        return None
    if status == OK:
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
    return None


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


def _reset_after_fork() -> None:
    # A connection opened before fork() would be shared by parent and child.
    global _local, _away_until
    _local = threading.local()
    _away_until = 0.0


os.register_at_fork(after_in_child=_reset_after_fork)
