"""The light layout with its query server away (``query/fallback.py``): a search of a text
answers from the keyword side, marked as such in the REST answer, on the search page and in
the search log, and counted for the health view; a model without a full-text column gets a 503
with ``Retry-After``. ``[path, "in-process"]`` keeps encoding here instead.

The query server is really away: ``SOCKET`` names a path nothing listens on. (The same with
a real server that stops, behind gunicorn: tests/serving/test_light_web.py.)
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_sbert.api import registry
from django_sbert.exceptions import EncoderAway
from django_sbert.models import SearchLog
from django_sbert.serving import query_client
from tests.api.conftest import _isolated_api_state, articles  # noqa: F401
from tests.testapp.models import Article, Note

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("articles")]

SEARCH = "/api/sbert/search/"
QUERY = "interest rates and the economy"


@pytest.fixture
def away(settings, tmp_path, monkeypatch):
    """The light layout, its server away; the search log on. Yields the socket path."""
    socket = str(tmp_path / "nobody-listens.sock")
    settings.SBERT = {
        **settings.SBERT,
        "QUERY_SERVER": {"SOCKET": socket},
        "FEEDBACK": {"LOG": True},
        "RATES": {"search": None, "logging": None},
    }
    monkeypatch.setattr(query_client, "_degraded", 0)
    # A web process: an in-process Celery worker started by an earlier test marks the whole
    # test process as one that encodes while the server is away.
    monkeypatch.setattr(query_client, "_in_process", False)
    monkeypatch.setattr(query_client, "_disabled", False)
    query_client.forget_away()
    yield socket
    query_client.close_connection()
    query_client.forget_away()


def degraded_count() -> int:
    return int(query_client.encoding_report()["degraded_searches"])


@override_settings(ROOT_URLCONF="tests.api.urls")
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_the_api_answers_from_the_keyword_side_marked(client, away, mode):
    registry.register(Article, fields=["id", "title"])
    response = client.get(SEARCH, {"model": "testapp.article", "q": QUERY, "mode": mode})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["degraded"] == "keyword"
    expected = Article.objects.keyword_search(QUERY, match="any")[:10]
    assert [row["id"] for row in body["results"]] == [row.pk for row in expected]
    assert body["results"] and all("keyword_score" in row for row in body["results"])
    assert all("similarity" not in row for row in body["results"])
    entry = SearchLog.objects.get(pk=body["search_id"])
    assert (entry.mode, entry.degraded, entry.version) == (mode, "keyword", "")
    assert entry.results[0][2] == pytest.approx(expected[0].keyword_score, abs=1e-5)
    report = query_client.encoding_report()
    assert report["layout"] == "query server" and report["query_server"].startswith("away")
    assert degraded_count() == 1


@override_settings(ROOT_URLCONF="tests.api.urls")
def test_a_keyword_search_is_not_degraded_and_a_model_without_keywords_gets_503(client, away):
    registry.register(Article, fields=["id", "title"])
    registry.register(Note, fields=["id", "text"])
    plain = client.get(SEARCH, {"model": "testapp.article", "q": "rates", "mode": "keyword"})
    assert plain.status_code == 200 and "degraded" not in plain.json()
    Note.objects.create(text="interest rates")
    refused = client.get(SEARCH, {"model": "testapp.note", "q": QUERY})
    assert refused.status_code == 503, refused.content
    assert refused["Retry-After"] == "5"
    assert refused.json()["detail"].startswith("Search by meaning is unavailable")
    assert degraded_count() == 0
    with pytest.raises(EncoderAway, match="nobody-listens.sock"):
        Article.objects.similar_to(QUERY)


@override_settings(ROOT_URLCONF="tests.views.urls")
@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_the_search_page_shows_keyword_results_with_a_notice(client, away, mode):
    response = client.get("/search/", {"q": QUERY, "mode": mode})
    assert response.status_code == 200
    expected = Article.objects.keyword_search(QUERY, match="any")[:10]
    page = response.context["page_obj"]
    assert [row.pk for row in page] == [row.pk for row in expected] and len(page) > 0
    assert response.context["degraded"] == "keyword"
    assert response.context["ranked_by"] == "keyword"
    html = response.content.decode()
    assert 'data-sbert-degraded="keyword"' in html and "match your words only" in html
    entry = SearchLog.objects.get()
    assert (entry.mode, entry.degraded) == (mode, "keyword")
    assert degraded_count() == 1


@override_settings(ROOT_URLCONF="tests.views.urls")
def test_a_page_on_a_field_without_keywords_is_503_with_retry_after(away, rf):
    from django_sbert.views import SearchView

    Note.objects.create(text="interest rates")
    view = SearchView.as_view(model=Note, modes=("vector",))
    response = view(rf.get("/notes/", {"q": QUERY}))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"


@override_settings(ROOT_URLCONF="tests.api.urls")
def test_in_process_while_away_encodes_here(client, away, settings):
    settings.SBERT = {**settings.SBERT, "QUERY_SERVER": {"SOCKET": [away, "in-process"]}}
    registry.register(Article, fields=["id", "title"])
    response = client.get(SEARCH, {"model": "testapp.article", "q": QUERY})
    assert response.status_code == 200, response.content
    body = response.json()
    assert "degraded" not in body and "similarity" in body["results"][0]
    assert query_client.encoding_report()["layout"] == "query server, in-process while away"
    assert degraded_count() == 0


@override_settings(ROOT_URLCONF="tests.views.urls")
def test_the_async_page_answers_by_words_too(away):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    response = async_to_sync(AsyncClient().get)("/async/", {"q": QUERY, "mode": "hybrid"})
    assert response.status_code == 200
    assert response.context["degraded"] == "keyword" and len(response.context["page_obj"]) > 0
    assert 'data-sbert-degraded="keyword"' in response.content.decode()


@override_settings(ROOT_URLCONF="tests.api.urls")
def test_suggestions_come_from_the_prefix_match_alone(client, away):
    registry.register(Article, fields=["id", "title"])
    response = client.get("/api/sbert/suggest/testapp.article/", {"q": "interest ra"})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results and all(row["vector_rank"] is None for row in results)
    assert results[0]["keyword_rank"] == 1
