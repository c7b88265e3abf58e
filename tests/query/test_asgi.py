"""Searches served by a real ASGI server: uvicorn runs ``tests/asgi_app`` in a subprocess on
the test database, and answers concurrent requests to an async search view (``asimilar_to``,
``ahybrid_search``, ``akeyword_search``) and to the REST API's ``search/`` (a sync DRF view,
which Django runs in a thread under ASGI) with what the same searches give here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest

from tests.query.test_async import committed_articles  # noqa: F401 - a fixture: committed rows
from tests.testapp.models import Article
from tests.worker_process import ROOT, test_database_url

pytest.importorskip("uvicorn")

QUERIES = [
    "interest rates and the economy",
    "a dog and a cat",
    "the government and tax",
    "guitar music",
    "people vote for a president",
    "the court and the law",
    "money is cheap",
    "the dog runs in the city",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """``uvicorn tests.asgi_app.asgi:application`` on a free port, logging to ``log``."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = log.open("ab")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.asgi_app.settings",
            "DATABASE_URL": test_database_url(),
        }
        command = [
            sys.executable, "-m", "uvicorn", "tests.asgi_app.asgi:application",
            "--host", "127.0.0.1", "--port", str(self.port), "--lifespan", "off",
            "--no-access-log",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.wait_until_ready(timeout=60)

    def wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited:\n{self.output()[-3000:]}")
            try:
                with urlopen(f"{self.url}/health/", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError as exc:
                if time.monotonic() > deadline:
                    message = f"uvicorn never answered:\n{self.output()[-3000:]}"
                    raise TimeoutError(message) from exc
                time.sleep(0.2)

    def get(self, path: str, **params: Any) -> Any:
        with urlopen(f"{self.url}{path}?{urlencode(params)}", timeout=30) as response:
            return json.loads(response.read())

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def uvicorn(django_db_setup, tmp_path_factory) -> Iterator[Server]:
    """One server for the module, on the test database (each test commits its own rows)."""
    running = Server(tmp_path_factory.mktemp("uvicorn") / "uvicorn.log")
    try:
        running.get("/search/", q="warm up", k=1)  # loads the encoder: not what is measured
        yield running
    finally:
        running.stop()


@pytest.fixture
def server(uvicorn, committed_articles) -> Server:  # noqa: F811
    return uvicorn


def concurrently(calls: list[Any], threads: int = 8) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


@pytest.mark.heavy
def test_an_async_view_answers_concurrent_searches(server):
    expected = {("vector", q): [a.pk for a in Article.objects.similar_to(q, k=3)] for q in QUERIES}
    # Hybrid ranks depend on the keyword column's word statistics, which each process reads
    # from pg_stats and keeps for a minute, and autovacuum may ANALYZE the new rows in between:
    # the server's own answer to one request is what its concurrent answers must repeat, and
    # it holds the rows this process finds.
    for q in QUERIES:
        alone = server.get("/search/", q=q, k=3, mode="hybrid", ef_search=64)["ids"]
        here = [a.pk for a in Article.objects.hybrid_search(q, k=3)]
        assert sorted(alone) == sorted(here), q
        expected[("hybrid", q)] = alone
    expected[("keyword", "rates")] = [a.pk for a in Article.objects.keyword_search("rates", k=3)]
    asked = [(mode, q, iterate) for mode, q in expected for iterate in ("for", "aiterator")]
    answers = concurrently(
        [
            lambda mode=mode, q=q, iterate=iterate: server.get(
                "/search/", q=q, k=3, mode=mode, iterate=iterate, ef_search=64
            )
            for mode, q, iterate in asked
        ]
    )
    for (mode, q, iterate), answer in zip(asked, answers, strict=True):
        assert answer["ids"] == expected[(mode, q)], (mode, q, iterate)
        for seen in answer["settings"]:  # what each statement ran under
            assert seen["statement_timeout"] == "5s"
            if mode != "keyword":
                assert seen["ef_search"] == "64" and seen["iterative_scan"] == "relaxed_order"
    assert "Traceback" not in server.output()


@pytest.mark.heavy
def test_the_rest_search_answers_concurrent_requests_under_asgi(server):
    expected = {q: [a.pk for a in Article.objects.similar_to(q, k=4)] for q in QUERIES}
    calls = [
        lambda q=q: server.get("/api/sbert/search/", model="testapp.article", q=q, k=4)
        for q in QUERIES * 2
    ]
    started = time.perf_counter()
    answers = concurrently(calls)
    elapsed = time.perf_counter() - started
    for q, answer in zip(QUERIES * 2, answers, strict=True):
        assert [r["id"] for r in answer["results"]] == expected[q]
        assert set(answer["results"][0]["object"]) == {"id", "title", "category"}
    assert "Traceback" not in server.output()
    print(f"\n{len(calls)} REST searches, 8 at a time, under uvicorn: {elapsed * 1000:.0f} ms")


@pytest.mark.heavy
def test_concurrent_async_searches_per_second(server):
    """Not a bound: prints how many distinct text searches the async view answers per second
    (each encoded, none from the cache) with 8 clients at a time, on this machine."""
    texts = [f"{q} {n}" for n in range(10) for q in QUERIES]
    started = time.perf_counter()
    answers = concurrently([lambda t=t: server.get("/search/", q=t, k=5) for t in texts])
    elapsed = time.perf_counter() - started
    assert all(len(answer["ids"]) == 5 for answer in answers)
    print(f"\n{len(texts)} async searches, 8 at a time: {len(texts) / elapsed:.0f} searches/s")
