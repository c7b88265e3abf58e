"""One query encoder per host, shared by its web processes: queries that arrive together are
taken in one batch, and each text's vector is cached for the whole host.

Why: N web processes that each encode their own searches each hold the model; one process
holds it once for the host. Each text of a batch is encoded alone (``serving.cache``'s
``encode_queries``), so its vector is the one a web process would encode for it, bit for bit,
whoever else searched at the same moment (docs/encoder.md, "Same text, same vector").
Searches' SQL stays in the web processes: only the text travels, and 1.5 KiB comes back::

    python manage.py sbert_query_server        # listens on SBERT["QUERY_SERVER"]["SOCKET"]

An asyncio loop reads requests (``query_client``'s wire format) and answers from the cache at
once; one batcher takes up to ``MAX_BATCH`` texts of one version (``WINDOW_MS`` after the
oldest arrived; no wait by default) and hands them to one of ``concurrency`` encoding threads
while the loop goes on reading; with several threads free, the waiting texts are shared
between them. Each text is encoded alone, so threads pay only where queries run outside
Python's GIL side by side (an ONNX Runtime graph: two cores for two queries); torch's passes
take turns on one model.
Past ``MAX_QUEUE`` waiting texts a request is answered busy at once (the search gets 503). The
server encodes with exactly the version a request names; a base-model version it does not
have is an error, which the web process answers by encoding the text itself, or in the light
layout from the keyword side (docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .query_client import ANSWER, BUSY, ERROR, HEADER, OK, exchange

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1 << 20  # a search text is far shorter; anything longer is refused
Key = tuple[str, str, str | None, str]  # encoder, version, directory, text


@dataclass
class _Waiting:
    key: Key
    future: asyncio.Future[bytes]
    arrived: float = field(default_factory=time.monotonic)


class QueryServer:
    """The server's state: the queue, the host-wide cache and counters (``stats()``).

    ``encode(texts, encoder, version, directory)`` returns ``(n, dim)`` float32 unit vectors;
    the management command passes ``serving.cache.encode_queries``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        encode: Any,
        *,
        max_batch: int = 16,
        window_ms: float = 0.0,
        max_queue: int = 64,
        cache_size: int = 10000,
        retry_after: int = 1,
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}.")
        self.path = os.fspath(path)
        self.encode = encode
        self.max_batch = max_batch
        self.window = window_ms / 1000.0
        self.max_queue = max_queue
        self.cache_size = cache_size
        self.retry_after = retry_after
        self.cache: OrderedDict[Key, bytes] = OrderedDict()
        self.queue: list[_Waiting] = []
        self.in_queue: dict[Key, asyncio.Future[bytes]] = {}  # equal texts share one encode
        self.counts: Counter[str] = Counter()
        self.batch_sizes: Counter[int] = Counter()
        self._arrived: asyncio.Event | None = None
        self.concurrency = concurrency
        self._encoding = ThreadPoolExecutor(concurrency, thread_name_prefix="sbert-query-encode")
        self._running: set[asyncio.Task[None]] = set()  # batches being encoded
        self._finished: asyncio.Event | None = None  # set when one of them ends

    # -- serving -------------------------------------------------------------------------

    async def serve(self, ready: asyncio.Event | None = None) -> None:
        """Listen until cancelled; ``ready`` is set once the socket accepts connections."""
        self._arrived, self._finished = asyncio.Event(), asyncio.Event()
        _remove_stale_socket(self.path)
        server = await asyncio.start_unix_server(self._connection, path=self.path)
        batcher = asyncio.create_task(self._batches())
        try:
            async with server:
                if ready is not None:
                    ready.set()
                await server.serve_forever()
        finally:
            batcher.cancel()
            for task in self._running:
                task.cancel()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self._encoding.shutdown(wait=False, cancel_futures=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                if length > MAX_REQUEST_BYTES:
                    await self._send(writer, ERROR, b"request too large")
                    return
                status, payload = await self.answer(await reader.readexactly(length))
                await self._send(writer, status, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the web process closed its connection (it exited, or timed out)
        except asyncio.CancelledError:
            pass  # the server stops: not an error of this connection
        finally:
            writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, payload: bytes) -> None:
        writer.write(ANSWER.pack(status, len(payload)) + payload)
        await writer.drain()

    async def answer(self, body: bytes) -> tuple[int, bytes]:
        """(status, payload) for one request: a vector's float32 bytes, busy or an error."""
        try:
            request = json.loads(body)
            if request.get("op") == "stats":
                return OK, json.dumps(self.stats()).encode()
            if request.get("op") == "clear":
                self.clear()
                return OK, b"{}"
            key: Key = (
                str(request["encoder"]),
                str(request["version"]),
                request.get("directory"),
                str(request["text"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.counts["errors"] += 1
            return ERROR, f"bad request: {type(exc).__name__}: {exc}".encode()
        self.counts["requests"] += 1
        cached = self.cache.get(key)
        if cached is not None:
            self.cache.move_to_end(key)
            self.counts["cache_hits"] += 1
            return OK, cached
        future = self.in_queue.get(key)
        if future is None:
            if len(self.queue) >= self.max_queue:
                self.counts["busy"] += 1
                return BUSY, str(self.retry_after).encode()
            future = asyncio.get_running_loop().create_future()
            self.queue.append(_Waiting(key, future))
            self.in_queue[key] = future
            assert self._arrived is not None
            self._arrived.set()
        else:
            self.counts["joined"] += 1
        try:
            return OK, await asyncio.shield(future)
        except Exception as exc:  # the encode failed: the web process encodes it itself
            self.counts["errors"] += 1
            return ERROR, f"{type(exc).__name__}: {exc}".encode()

    async def _batches(self) -> None:
        assert self._arrived is not None and self._finished is not None
        while True:
            await self._arrived.wait()
            if not self.queue:
                self._arrived.clear()
                continue
            if len(self.queue) < self.max_batch:  # give others the window to join
                delay = self.queue[0].arrived + self.window - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            while len(self._running) >= self.concurrency:  # every encoding thread is busy
                self._finished.clear()
                await self._finished.wait()
            # Share what waits between the threads free now, so none sits idle beside a batch.
            free = self.concurrency - len(self._running)
            batch = self._take_batch(min(self.max_batch, -(-len(self.queue) // free)))
            task = asyncio.create_task(self._encode_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._batch_done)

    def _batch_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        assert self._finished is not None
        self._finished.set()

    async def _encode_batch(self, batch: list[_Waiting]) -> None:
        encoder, version, directory, _ = batch[0].key
        texts = [waiting.key[3] for waiting in batch]
        try:
            vectors = await asyncio.get_running_loop().run_in_executor(
                self._encoding, self.encode, texts, encoder, version, directory
            )
        except Exception as exc:
            logger.warning("django-sbert: query server could not encode a batch: %s", exc)
            for waiting in batch:
                self.in_queue.pop(waiting.key, None)
                waiting.future.set_exception(exc)
            return
        self.counts["batches"] += 1
        self.counts["encoded"] += len(batch)
        self.batch_sizes[len(batch)] += 1
        for waiting, vector in zip(batch, vectors, strict=True):
            payload = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
            self._remember(waiting.key, payload)
            self.in_queue.pop(waiting.key, None)
            waiting.future.set_result(payload)

    def _take_batch(self, size: int) -> list[_Waiting]:
        """Up to ``size`` waiting texts of the oldest one's version, oldest first."""
        version = self.queue[0].key[:3]
        batch, rest = [], []
        for waiting in self.queue:
            if len(batch) < size and waiting.key[:3] == version:
                batch.append(waiting)
            else:
                rest.append(waiting)
        self.queue = rest
        return batch

    def _remember(self, key: Key, payload: bytes) -> None:
        if self.cache_size <= 0:
            return
        self.cache[key] = payload
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)

    def clear(self) -> None:
        """Forget the cached vectors and zero the counters (after a change of the query
        prompt, say, or between two measurements)."""
        self.cache.clear()
        self.counts.clear()
        self.batch_sizes.clear()

    def stats(self) -> dict[str, Any]:
        """Counters since start: requests, cache_hits, joined, batches, encoded, busy, errors,
        and now waiting, encoding (batches in the encoding threads, of ``concurrency``), cached
        and the batch sizes seen."""
        return {
            **{name: self.counts[name] for name in _COUNTERS},
            "waiting": len(self.queue),
            "encoding": len(self._running),
            "concurrency": self.concurrency,
            "cached": len(self.cache),
            "batch_sizes": {str(size): n for size, n in sorted(self.batch_sizes.items())},
        }


_COUNTERS = ("requests", "cache_hits", "joined", "batches", "encoded", "busy", "errors")


def _remove_stale_socket(path: str) -> None:
    """Remove a socket file left by a server that is gone; refuse to take over a live one."""
    if not os.path.exists(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: a crashed server's file
    else:
        raise OSError(f"another query server already listens on {path}")
    finally:
        probe.close()


def server_stats(
    path: str | os.PathLike[str], timeout: float = 5.0, *, clear: bool = False
) -> dict[str, Any]:
    """Ask the server listening on ``path`` for its counters (``QueryServer.stats()``);
    ``clear=True`` then empties its cache and zeroes them."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect(os.fspath(path))
        status, payload = exchange(connection, json.dumps({"op": "stats"}).encode())
        if clear and status == OK:
            exchange(connection, json.dumps({"op": "clear"}).encode())
    if status != OK:
        raise OSError(payload.decode())
    return json.loads(payload)
