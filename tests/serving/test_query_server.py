"""The host's query server: a real ``sbert_query_server`` subprocess over a Unix socket, the
tiny encoder, the test database. Searches in this process send it their texts and get the
vectors this process would have encoded, bit for bit, whatever texts arrived with them;
concurrent texts are taken in batches; a second process's cache miss is the host's cache hit;
a server that is away or restarts never fails a search: with ``[socket, "in-process"]`` this
process encodes the text itself meanwhile, with a path alone (the light layout) the search gets
``EncoderAway`` (answered from the keyword side by the views: tests/query/test_fallback.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_sbert.encoder.paths import onnxruntime_missing
from django_sbert.exceptions import EncoderAway
from django_sbert.serving import (
    clear_query_cache,
    encode_texts,
    query_client,
    query_vector,
    serving_record,
)
from django_sbert.serving.query_client import OK, exchange
from django_sbert.serving.query_server import QueryServer, server_stats
from tests.encoder.onnx_graphs import MeetingSession
from tests.query_server_process import QueryServerProcess
from tests.testapp.models import Article

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]
needs_onnx = pytest.mark.skipif(
    onnxruntime_missing() is not None, reason=str(onnxruntime_missing())
)

TEXTS = [
    "central banks raise interest rates",
    "the dog runs fast in the city",
    "a man is playing the guitar",
    "people vote for a new president",
    "the court and the new law",
    "money is cheap and the market is high",
    "cats and dogs",
    "tax and the government",
]


@pytest.fixture
def server(tmp_path, settings, monkeypatch):
    started: list[QueryServerProcess] = []
    monkeypatch.setattr(query_client, "RETRY_SECONDS", 0.0)
    # A web process, whatever an earlier test's in-process Celery worker marked this one as.
    monkeypatch.setattr(query_client, "_in_process", False)
    monkeypatch.setattr(query_client, "_disabled", False)

    def start(in_process: bool = False, **flags) -> QueryServerProcess:
        process = QueryServerProcess(tmp_path, **flags)
        started.append(process)
        socket = [process.socket, "in-process"] if in_process else process.socket
        settings.SBERT = {**settings.SBERT, "QUERY_SERVER": {"SOCKET": socket}}
        return process

    serving_record("default")  # records the base version before the server reads it
    yield start
    query_client.close_connection()
    query_client.forget_away()
    for process in started:
        process.stop()


def here(texts: list[str]) -> np.ndarray:
    """The vectors this process encodes itself, one text at a time as a web process would."""
    return np.stack([encode_texts([text], role="query")[0] for text in texts])


def test_a_search_text_is_encoded_by_the_server_as_this_process_would(server):
    process = server()
    vector, version = query_vector(TEXTS[0])
    assert version == serving_record("default").version
    assert process.stats()["encoded"] == 1
    np.testing.assert_allclose(vector, here(TEXTS[:1])[0], atol=1e-5)
    assert not vector.flags.writeable

    query_vector(TEXTS[0])  # this process's own cache: the server is not asked
    assert process.stats()["requests"] == 1
    clear_query_cache()  # as another web process on the host would: the host's cache answers
    again, _ = query_vector(TEXTS[0])
    stats = process.stats()
    assert (stats["requests"], stats["cache_hits"], stats["encoded"]) == (2, 1, 1)
    np.testing.assert_array_equal(again, vector)


def test_texts_that_arrive_together_are_encoded_in_one_batch(server):
    process = server(window_ms=300, max_batch=16)
    texts = TEXTS + TEXTS[:2]  # two texts asked twice while waiting: encoded once each
    results: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(texts))

    def search(index: int) -> None:
        start.wait()
        try:
            results[index] = query_vector(texts[index])[0]
        finally:
            query_client.close_connection()
            connection.close()  # the serving-version read opened one in this thread

    threads = [threading.Thread(target=search, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = process.stats()
    assert stats["requests"] == len(texts)
    assert stats["encoded"] == len(TEXTS)  # each distinct text once
    assert stats["batches"] < len(TEXTS), stats  # not one forward pass per text
    assert max(int(size) for size in stats["batch_sizes"]) > 1, stats
    expected = here(texts)
    for index in range(len(texts)):
        np.testing.assert_allclose(results[index], expected[index], atol=1e-5)


def test_batch_composition_does_not_change_a_vector(server):
    """Texts of 1 to 60 tokens sent together, in two different groupings: the server batches
    them, and each vector is, bit for bit, the one this process encodes for the text alone."""
    from tests.encoder.test_encode import sentences

    texts = sentences(14, seed=2) + ["a", "interest rates " * 30]
    expected = here(texts)
    for max_batch, order in ((16, texts), (3, texts[::-1])):
        process = server(window_ms=300, max_batch=max_batch)
        results: dict[str, np.ndarray] = {}
        start = threading.Barrier(len(order))

        def search(text: str, results=results, start=start) -> None:
            start.wait()
            try:
                results[text] = query_client.remote_query_vector(text, serving_record("default"))
            finally:
                query_client.close_connection()
                connection.close()

        threads = [threading.Thread(target=search, args=(text,)) for text in order]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = process.stats()
        assert stats["encoded"] == len(texts) and stats["batches"] < len(texts), stats
        for text, vector in zip(texts, expected, strict=True):
            np.testing.assert_array_equal(results[text], vector)
        process.stop()


def test_searches_go_on_when_the_server_is_away_and_use_it_again_when_it_is_back(
    server, embed, caplog
):
    embed(Article.objects.create(title="interest rates", body="central banks raise rates"))
    process = server(in_process=True)
    assert Article.objects.similar_to(TEXTS[0])[:1].count() == 1
    assert process.stats()["encoded"] == 1
    process.stop()  # this thread's connection to it is now broken

    vector, _ = query_vector(TEXTS[1])  # encoded here, no error
    np.testing.assert_allclose(vector, here(TEXTS[1:2])[0], atol=1e-5)
    assert "query server" in caplog.text and "is away" in caplog.text

    back = server(in_process=True)  # the same socket path; RETRY_SECONDS 0: asked again at once
    query_vector(TEXTS[2])
    assert back.stats()["encoded"] == 1


def test_in_the_light_layout_a_server_away_is_encoder_away_until_it_is_back(server):
    process = server()
    query_vector(TEXTS[0])
    process.stop()
    with pytest.raises(EncoderAway, match="gave no vector \\(away: "):
        query_vector(TEXTS[1])
    assert "degraded_searches" in query_client.encoding_report()
    assert query_client.encoding_report()["query_server"].startswith("away")
    back = server()
    vector, _ = query_vector(TEXTS[1])
    np.testing.assert_allclose(vector, here(TEXTS[1:2])[0], atol=1e-5)
    assert back.stats()["encoded"] == 1
    assert query_client.encoding_report()["query_server"] == "ok"


def test_a_server_with_no_socket_at_all_changes_nothing(settings, tmp_path, monkeypatch):
    socket = [str(tmp_path / "nobody.sock"), "in-process"]
    settings.SBERT = {**settings.SBERT, "QUERY_SERVER": {"SOCKET": socket}}
    monkeypatch.setattr(query_client, "RETRY_SECONDS", 60.0)
    try:
        vector, _ = query_vector(TEXTS[3])
        np.testing.assert_allclose(vector, here(TEXTS[3:4])[0], atol=1e-5)
    finally:
        query_client.forget_away()


def test_a_version_the_server_does_not_have_is_encoded_here(server, caplog, settings):
    process = server(in_process=True)
    current = serving_record("default")
    other = type(current)(current.encoder, "all-MiniLM-L6-v2:not-this-host", None)
    assert query_client.remote_query_vector(TEXTS[4], other) is None
    assert process.stats()["errors"] == 1
    assert "must share their SBERT settings" in caplog.text
    # The light layout has no model to encode it with: the search cannot be served by meaning.
    settings.SBERT = {**settings.SBERT, "QUERY_SERVER": {"SOCKET": process.socket}}
    with pytest.raises(EncoderAway, match="must share their SBERT settings"):
        query_client.remote_query_vector(TEXTS[4], other)


def test_the_command_says_what_is_missing(tmp_path):
    with pytest.raises(CommandError, match="No socket"):
        call_command("sbert_query_server", "--stats")
    with pytest.raises(CommandError, match="No query server answers"):
        call_command("sbert_query_server", "--stats", "--socket", str(tmp_path / "none.sock"))
    with pytest.raises(OSError):
        server_stats(tmp_path / "none.sock")


@needs_onnx
def test_the_server_encodes_as_many_queries_at_once_as_its_concurrency(tmp_path):
    """Texts that arrive together are shared between the encoding threads, which run inside
    one ONNX Runtime session at the same moment; each vector is the one the text gets alone."""
    from django_sbert.conf import encoder_config
    from django_sbert.encoder import SentenceEncoder

    model = SentenceEncoder.load(encoder_config("default")["MODEL"], query_runtime="onnxruntime")
    expected = np.stack([model.encode([text], alone=True, threads=1) for text in TEXTS])[:, 0]
    graph = model._onnx
    graph._session = MeetingSession(graph._session, parties=2)

    def encode(texts: list[str], *_: object) -> np.ndarray:
        return model.encode(texts, alone=True)

    # A window, so that all eight wait together even on a busy machine: then 4 and 4.
    server = QueryServer(str(tmp_path / "q.sock"), encode, window_ms=1000, concurrency=2)
    start = threading.Barrier(len(TEXTS))
    with running(server) as ask:

        def search(text: str) -> np.ndarray:
            start.wait()
            return ask(text)

        with ThreadPoolExecutor(len(TEXTS)) as pool:
            vectors = list(pool.map(search, TEXTS))
        stats = server.stats()
    assert not graph._session.barrier.broken, "the two batches were not encoded at once"
    assert stats["concurrency"] == 2
    assert stats["batches"] == 2 and stats["batch_sizes"] == {"4": 2}, stats  # shared evenly
    np.testing.assert_array_equal(np.stack(vectors), expected)


def test_a_concurrency_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        QueryServer(str(tmp_path / "q.sock"), None, concurrency=0)
    with pytest.raises(CommandError, match="--concurrency must be at least 1"):
        call_command("sbert_query_server", "--socket", str(tmp_path / "q"), "--concurrency", "0")


@contextmanager
def running(server: QueryServer) -> Iterator[Callable[[str], np.ndarray]]:
    """``server`` listening in a thread of its own; yields ``ask(text)``, one connection per
    calling thread."""
    loop = asyncio.new_event_loop()
    started, task = threading.Event(), []

    def serve() -> None:
        ready = asyncio.Event()
        task.append(loop.create_task(server.serve(ready)))
        loop.run_until_complete(ready.wait())
        started.set()
        loop.run_until_complete(asyncio.gather(task[0], return_exceptions=True))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(30)
    local = threading.local()
    request = {"encoder": "default", "version": "base", "directory": None}

    def ask(text: str) -> np.ndarray:
        if getattr(local, "connection", None) is None:
            local.connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            local.connection.connect(server.path)
        status, payload = exchange(local.connection, json.dumps({**request, "text": text}).encode())
        assert status == OK, payload
        return np.frombuffer(payload, dtype=np.float32)

    try:
        yield ask
    finally:
        loop.call_soon_threadsafe(task[0].cancel)
        thread.join(timeout=30)
        loop.close()
