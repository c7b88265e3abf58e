"""The search page (django_sbert/views/search.py) on the test models and the tiny random
encoder: each mode ranks as its queryset method does, ``?page=`` stops at ``max_pages`` before
anything is searched and the ranking is fetched in one bounded query, ``min_similarity``, the
filter hook and django-filter, form errors, passages holding markup rendered escaped, and the
async view served by uvicorn."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from django_sbert import indexing
from django_sbert.views import AsyncSearchView, SearchView
from tests.testapp.models import Article, Note, Report
from tests.views.urls import ArticleSearch
from tests.worker_process import ROOT, test_database_url

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.views.urls")]

ARTICLES = [
    ("central banks raise interest rates", "the economy is slow and rates go up", "economy"),
    ("interest rates fall", "money is cheap and the market is high", "economy"),
    ("tax and the government", "the minister and the tax on prices", "economy"),
    ("the market and the rates", "prices and rates in the city", "economy"),
    ("cats and dogs", "a cat and a dog in the city", "pets"),
    ("the dog runs fast", "a big dog is running in the country", "pets"),
    ("a cat sleeps", "the old cat sleeps in the sun", "pets"),
    ("guitar music", "a man is playing the guitar", "music"),
    ("a song on the radio", "the woman sings a new song", "music"),
    ("the election vote", "people vote for a new president", "politics"),
    ("court and law", "the court and the new law", "politics"),
    ("the minister resigns", "the president and the party lost the vote", "politics"),
]
QUERY = "interest rates and the economy"


@pytest.fixture
def articles(embed) -> list[Article]:
    rows = Article.objects.bulk_create(  # no signals: nothing is queued to a broker
        Article(title=title, body=body, category=category) for title, body, category in ARTICLES
    )
    return list(embed(*rows))


def pks(rows) -> list[int]:
    return [row.pk for row in rows]


def test_no_query_shows_the_form_and_searches_nothing(client, articles):
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/search/")
    assert response.status_code == 200
    assert response.context["page_obj"] is None and not response.context["searched"]
    assert response.context["mode"] == "hybrid"  # the first of the view's modes
    assert len(queries) == 0
    html = response.content.decode()
    assert 'role="search"' in html and 'name="q"' in html and 'id="modes"' in html
    assert "data-sbert-suggest-url" not in html and "suggest.js" not in html


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_each_mode_returns_the_rows_its_search_ranks(client, articles, mode):
    q = "rates" if mode == "keyword" else QUERY  # keyword_match "all": every word must occur
    response = client.get("/search/", {"q": q, "mode": mode})
    assert response.status_code == 200
    page = response.context["page_obj"]
    expected = {
        "vector": Article.objects.similar_to(q),
        "keyword": Article.objects.keyword_search(q, match="all"),
        "hybrid": Article.objects.hybrid_search(q),
    }[mode][:10]
    assert pks(page) == pks(expected) and len(page) > 0
    assert response.context["mode"] == response.context["ranked_by"] == mode
    timing = response.context["timing"]
    assert response.context["search_ms"] == pytest.approx(timing.total_ms) and timing.query_ms > 0
    html = response.content.decode()
    assert "Search took" in html and f"{mode} search" in html
    if mode == "keyword":
        assert timing.encode_ms is None and "no query to encode" in html
        scores = [row.keyword_score for row in page]
        assert 'class="sbert-keyword-score"' in html
    else:
        assert timing.encode_ms is not None and "encoding the query" in html
        scores = [row.similarity for row in page if row.similarity is not None]
        assert html.count('class="sbert-similarity"') == len(scores)
    if mode != "hybrid":  # hybrid is ordered by its fused score
        assert scores == sorted(scores, reverse=True)


def test_a_repeated_query_comes_from_the_cache(client, articles):
    client.get("/search/", {"q": QUERY, "mode": "vector"})
    again = client.get("/search/", {"q": QUERY, "mode": "vector"})
    assert again.context["timing"].cached and "(cached)" in again.content.decode()


def test_pages_stop_at_max_pages_and_the_ranking_is_one_bounded_query(client, articles):
    # /shallow/: paginate_by=2, max_pages=3, so at most 6 rows of a ranking are ever fetched.
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/shallow/", {"q": QUERY, "mode": "vector", "page": 3})
    assert response.status_code == 200
    page = response.context["page_obj"]
    assert page.number == 3 and response.context["paginator"].count == 6
    assert pks(page) == pks(Article.objects.similar_to(QUERY)[4:6])
    searches = [q["sql"] for q in queries if "<=>" in q["sql"]]
    assert len(searches) == 1 and searches[0].rstrip().endswith("LIMIT 6"), searches
    links = re.findall(r'href="\?([^"]+)"', response.content.decode())
    assert {unescape(link) for link in links} >= {
        f"q={QUERY.replace(' ', '+')}&mode=vector&page={n}" for n in (1, 2)
    }

    for beyond in (4, 10**9):  # a deep offset is never asked of the database
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/shallow/", {"q": QUERY, "mode": "vector", "page": beyond})
        assert response.status_code == 404
        assert len(queries) == 0

    # Past the last page of results (within max_pages): ListView's 404.
    response = client.get("/shallow/", {"q": "rates", "mode": "keyword", "page": 3})
    assert Article.objects.keyword_search("rates").count() <= 4
    assert response.status_code == 404
    assert client.get("/shallow/", {"q": QUERY, "page": "last"}).context["page_obj"].number == 3


def test_min_similarity_leaves_out_the_rows_less_similar(articles):
    ranked = list(Article.objects.similar_to(QUERY, k=12))
    threshold = (ranked[2].similarity + ranked[3].similarity) / 2
    view = ArticleSearch.as_view(min_similarity=threshold)
    response = view(RequestFactory().get("/", {"q": QUERY, "mode": "vector"}))
    assert pks(response.context_data["page_obj"]) == pks(ranked[:3])

    # Hybrid: the rows only the vector side found go below it; keyword matches stay.
    nearest = list(Article.objects.similar_to("rates", k=12))
    threshold = (nearest[2].similarity + nearest[3].similarity) / 2
    view = ArticleSearch.as_view(min_similarity=threshold)
    response = view(RequestFactory().get("/", {"q": "rates", "mode": "hybrid"}))
    fetched = response.context_data["paginator"].object_list
    keyword = set(pks(Article.objects.keyword_search("rates", match="any")))
    kept = {
        row.pk
        for row in Article.objects.hybrid_search("rates", k=100)
        if row.pk in keyword or (row.similarity is not None and row.similarity >= threshold)
    }
    assert keyword and set(pks(fetched)) == kept
    assert len(kept) < len(nearest)  # 3 nearest and at most 4 keyword matches: some left out


def test_the_filter_hook_restricts_every_mode(client, articles):
    for mode in ("vector", "hybrid", "keyword"):
        response = client.get("/category/", {"q": "rates", "mode": mode, "category": "pets"})
        assert all(row.category == "pets" for row in response.context["page_obj"]), mode
    response = client.get("/category/", {"q": QUERY, "mode": "vector", "category": "economy"})
    rows = list(response.context["page_obj"])
    assert len(rows) == 4 and {row.category for row in rows} == {"economy"}
    assert "category=economy" in response.context["page_query"]  # page links keep it


def test_a_mode_the_page_does_not_offer_is_a_form_error(client, articles):
    response = client.get("/search/", {"q": QUERY, "mode": "telepathy"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Unknown mode telepathy: this page searches by hybrid, vector, keyword." in html
    assert response.context["page_obj"] is None
    response = client.get("/vector-only/", {"q": QUERY, "mode": "hybrid"})
    assert response.status_code == 400 and "searches by vector." in response.content.decode()
    response = client.get("/vector-only/", {"q": QUERY})  # no mode: the default
    assert response.status_code == 200 and response.context["mode"] == "vector"
    assert 'id="modes"' not in response.content.decode()  # one mode: no switch


def test_a_query_over_the_length_limit_is_a_form_error(client, articles, settings):
    settings.SBERT = {**settings.SBERT, "SEARCH": {"MAX_QUERY_LENGTH": 20}}
    response = client.get("/search/", {"q": "x" * 21})
    assert response.status_code == 400 and 'maxlength="20"' in response.content.decode()
    assert client.get("/search/", {"q": "x" * 20, "mode": "keyword"}).status_code == 200


@pytest.fixture
def reports():
    """Reports whose passages hold markup, indexed by their passages."""
    rows = Report.objects.bulk_create(
        [
            Report(
                title="<b>Bold</b> claims & more",
                body="The bank will raise interest <script>alert(1)</script> rates. The dog runs.",
                category="economy",
            ),
            Report(
                title="dogs", body="The dog runs fast. A woman is playing music.", category="pets"
            ),
        ]
    )
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    return rows


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_passages_with_markup_are_shown_escaped(client, reports, mode):
    response = client.get("/reports/", {"q": "alert script interest rates", "mode": mode})
    assert response.status_code == 200
    rows = list(response.context["page_obj"])
    assert any(getattr(row, "snippet", None) for row in rows)  # highlighted
    html = response.content.decode()
    # The passages of 24 tokens cut the tag in two; each part is shown as text.
    assert "<script" not in html and "</script>" not in html and "<b>" not in html
    assert "alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;Bold&lt;/b&gt; claims &amp; more" in html
    assert "<mark>" in html


def test_a_suggest_url_marks_the_box_and_loads_the_script(client, articles):
    html = client.get("/suggesting/").content.decode()
    assert 'data-sbert-suggest-url="/suggest/"' in html
    assert 'src="/static/django_sbert/suggest.js"' in html or "django_sbert/suggest.js" in html


def test_settings_that_cannot_work_say_what_to_change(rf):
    class NoteSearch(SearchView):
        model = Note  # no keyword_search=True

    with pytest.raises(ImproperlyConfigured, match=r"Set modes = \('vector',\)"):
        NoteSearch.as_view()(rf.get("/", {"q": "x"}))
    assert NoteSearch.as_view(modes=("vector",))(rf.get("/")).status_code == 200

    class Nothing(SearchView):
        pass

    with pytest.raises(ImproperlyConfigured, match="missing a model"):
        Nothing.as_view()(rf.get("/"))


def test_filterset_class_without_django_filter_says_to_install_it(rf, monkeypatch):
    from django_sbert.views import search as search_module

    # As on a site without django-filter (the dev install has it): the view finds no package.
    monkeypatch.setattr(
        search_module,
        "find_spec",
        lambda name: None if name == "django_filters" else find_spec(name),
    )
    view = ArticleSearch.as_view(filterset_class=object)
    with pytest.raises(ImproperlyConfigured, match="pip install django-filter"):
        view(rf.get("/", {"q": "x"}))


def test_a_filterset_filters_the_search(client, articles, rf):
    django_filters = pytest.importorskip("django_filters")

    class ArticleFilter(django_filters.FilterSet):
        class Meta:
            model = Article
            fields = ["category"]

    view = ArticleSearch.as_view(filterset_class=ArticleFilter)
    response = view(rf.get("/", {"q": QUERY, "mode": "vector", "category": "music"}))
    rows = list(response.context_data["page_obj"])
    assert len(rows) == 2 and {row.category for row in rows} == {"music"}
    assert response.render().content.decode().count('name="category"') == 1


def test_the_async_view_is_async():
    assert AsyncSearchView.view_is_async and not SearchView.view_is_async


# -- the async view, served by uvicorn ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def uvicorn(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """``uvicorn`` serving tests/views/urls.py on the test database; its URL."""
    log_path: Path = tmp_path_factory.mktemp("uvicorn") / "uvicorn.log"
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.views.asgi_settings",
        "DATABASE_URL": test_database_url(),
    }
    command = [
        sys.executable, "-m", "uvicorn", "tests.asgi_app.asgi:application",
        "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off", "--no-access-log",
    ]  # fmt: skip
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"uvicorn exited:\n{log_path.read_text()[-3000:]}")
            try:
                with urlopen(f"{url}/health/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"uvicorn never answered:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        yield url
        assert "Traceback" not in log_path.read_text()
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def committed(transactional_db, embed) -> list[Article]:
    """Committed rows, which the uvicorn process sees."""
    rows = Article.objects.bulk_create(
        Article(title=title, body=body, category=category) for title, body, category in ARTICLES
    )
    rows[0].title = "<script>alert(1)</script> rates"
    Article.objects.filter(pk=rows[0].pk).update(title=rows[0].title)
    return list(embed(*rows))


def result_ids(html: str) -> list[str]:
    return re.findall(r'<span class="title">(.*?)</span>', html)


@pytest.mark.heavy
def test_the_async_view_under_uvicorn(uvicorn, committed):
    queries = [(QUERY, mode) for mode in ("vector", "hybrid")] + [("rates", "keyword")]
    queries += [("the dog and the cat", "vector"), ("vote for the president", "hybrid")]
    expected = {}
    for q, mode in queries:
        search = {
            "vector": lambda q: Article.objects.similar_to(q)[:10],
            "hybrid": lambda q: Article.objects.hybrid_search(q)[:10],
            "keyword": lambda q: Article.objects.keyword_search(q)[:10],
        }[mode]
        expected[(q, mode)] = [str(row) for row in search(q)]

    def get(q: str, mode: str) -> tuple[int, str]:
        params = urlencode({"q": q, "mode": mode})
        with urlopen(f"{uvicorn}/async/?{params}", timeout=60) as response:
            return response.status, response.read().decode()

    with ThreadPoolExecutor(8) as pool:  # concurrent requests, twice each
        answers = list(pool.map(lambda asked: get(*asked), queries * 2))
    for (q, mode), (status, html) in zip(queries * 2, answers, strict=True):
        assert status == 200, html
        shown = [unescape(title) for title in result_ids(html)]
        if mode == "hybrid":  # word statistics are read per process: the same rows
            assert sorted(shown) == sorted(expected[(q, mode)]), (q, mode)
        else:
            assert shown == expected[(q, mode)], (q, mode)
        assert "Search took" in html
        assert "<script>alert(1)</script>" not in html
    assert any("&lt;script&gt;alert(1)&lt;/script&gt; rates" in html for _, html in answers)

    with pytest.raises(Exception, match="404"):
        urlopen(f"{uvicorn}/async/?{urlencode({'q': QUERY, 'page': 11})}", timeout=30)
    with pytest.raises(Exception, match="400"):
        urlopen(f"{uvicorn}/async/?{urlencode({'q': QUERY, 'mode': 'nope'})}", timeout=30)
