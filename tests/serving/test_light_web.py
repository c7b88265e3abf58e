"""The light layout with real processes: gunicorn with two sync workers (``tests/web_app``,
``SBERT["QUERY_SERVER"]["SOCKET"]`` a path) and the host's real ``sbert_query_server``.

The web processes serve semantic and hybrid searches without ever loading torch or ONNX
Runtime (their ``/proc/<pid>/maps`` and ``sys.modules``); with the query server stopped, the
REST API and the search page answer from the keyword side, marked, the search log marks the
rows and the health view counts them; once the server is back, searches by meaning return.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import urlopen

import psutil
import pytest

from django_sbert import indexing
from django_sbert.models import SearchLog
from tests.api.conftest import ARTICLES
from tests.query_server_process import QueryServerProcess
from tests.serving.test_health import Gunicorn, web_host  # noqa: F401
from tests.testapp.models import Article

pytestmark = [pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

SEARCH = "/api/sbert/search/"
# Libraries a light web process must not load: their shared objects in /proc/<pid>/maps.
HEAVY_LIBRARIES = ("libtorch", "onnxruntime")


def mapped_heavy(pid: int) -> list[str]:
    """The heavy shared libraries mapped into process ``pid``."""
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        paths = {line.split()[-1] for line in maps if "/" in line}
    return sorted(p for p in paths if any(name in p for name in HEAVY_LIBRARIES))


def page(host: Gunicorn, **params: str) -> tuple[int, str]:
    try:
        with urlopen(f"{host.url}/search/?{urlencode(params)}", timeout=30) as response:
            return response.status, response.read().decode()
    except HTTPError as error:
        return error.code, error.read().decode()


def per_process(host: Gunicorn, path: str, timeout: float = 20) -> dict[int, dict]:
    """The last answer of ``path`` from each of the two worker processes, by pid."""
    answers: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(answers) < 2:
        status, body = host.get(path)
        assert status == 200, body
        answers[body["pid"]] = body
        assert time.monotonic() < deadline, f"one process never answered: {answers}"
    return answers


@pytest.fixture
def query_server(tmp_path) -> Iterator[list[QueryServerProcess]]:
    started: list[QueryServerProcess] = []
    yield started
    for process in started:
        process.stop()


def test_light_web_processes_load_no_model_and_answer_by_words_while_the_server_is_away(
    web_host,  # noqa: F811
    query_server,
    tmp_path,
):
    Article.objects.bulk_create(Article(title=t, body=b, category=c) for t, b, c in ARTICLES)
    indexing.embed_stale(indexing.get_ref("testapp.Article", "embedding"))
    query_server.append(QueryServerProcess(tmp_path))
    socket = query_server[0].socket
    host = web_host("light", SBERT_TEST_QUERY_SOCKET=socket)
    host.wait_for_log("web process warmed", count=2, timeout=120)
    workers = [child.pid for child in psutil.Process(host.process.pid).children()]
    assert len(workers) == 2

    # Semantic and hybrid searches, the REST API and the page: enough to reach both processes.
    for i in range(6):
        for mode in ("vector", "hybrid"):
            q = f"interest rates {i} {mode}"
            status, body = host.get(SEARCH, model="testapp.article", q=q, mode=mode)
            assert status == 200, body
            assert body["results"] and "degraded" not in body
            assert all("similarity" in row for row in body["results"])
        status, html = page(host, q=f"the dog runs {i}", mode="hybrid")
        assert status == 200 and "sbert-degraded" not in html and "result" in html
    assert query_server[0].stats()["requests"] >= 18
    for pid in workers:
        assert mapped_heavy(pid) == [], pid
    assert {pid: body["heavy"] for pid, body in per_process(host, "/modules/").items()} == {
        pid: [] for pid in workers
    }

    # The query server stops: searches by meaning answer from the keyword side, marked.
    query_server[0].stop()
    degraded = 0
    for i in range(4):
        for mode in ("vector", "hybrid"):
            q = f"the court and the law {i} {mode}"
            status, body = host.get(SEARCH, model="testapp.article", q=q, mode=mode)
            assert status == 200, body
            assert body["degraded"] == "keyword", body
            assert body["results"] and all("keyword_score" in row for row in body["results"])
            degraded += 1
        status, html = page(host, q=f"a cat and a dog {i}", mode="vector")
        assert status == 200
        assert 'data-sbert-degraded="keyword"' in html and 'class="result"' in html
        degraded += 1
    deadline = time.monotonic() + 10  # the log's INSERTs run after each response is sent
    while SearchLog.objects.filter(degraded="keyword").count() < degraded:
        assert time.monotonic() < deadline, list(SearchLog.objects.values("mode", "degraded"))
        time.sleep(0.1)
    assert SearchLog.objects.filter(degraded="keyword", version="").count() == degraded
    health = per_process(host, "/sbert/health/")
    assert sum(body["encoding"]["degraded_searches"] for body in health.values()) == degraded
    for body in health.values():
        assert body["status"] == "ok", body  # the host still serves: by words, marked
        assert body["encoding"]["layout"] == "query server"
    assert any(body["encoding"]["query_server"].startswith("away") for body in health.values())

    # It comes back: searches by meaning return within the processes' retry delay.
    query_server.append(QueryServerProcess(tmp_path))
    deadline, semantic = time.monotonic() + 30, 0
    while semantic < 6:
        assert time.monotonic() < deadline, body
        q = f"central banks {semantic} {time.monotonic()}"
        status, body = host.get(SEARCH, model="testapp.article", q=q)
        assert status == 200, body
        semantic = semantic + 1 if "degraded" not in body else 0
        time.sleep(0.2)
    assert "similarity" in body["results"][0]
    for pid in workers:
        assert mapped_heavy(pid) == [], pid
