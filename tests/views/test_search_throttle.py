"""The search pages are throttled like the REST API's search, staff left out, and a page's
highlighting encodes a bounded number of sentences (issue 67, item 2); real PostgreSQL, the
tiny encoder, Django's test client."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from django_sbert import indexing
from django_sbert.query import highlight
from django_sbert.views import search
from tests.testapp.models import Article, Report

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.views.urls")]

SENTENCES = "The bank will raise interest rates. The dog runs. A cat sleeps. Music plays."


@pytest.fixture(autouse=True)
def empty_counts():
    cache.clear()  # the throttle's counts
    yield
    cache.clear()


def test_search_pages_are_throttled_and_highlighting_is_bounded(
    client, embed, settings, monkeypatch
):
    embed(*Article.objects.bulk_create(Article(title=f"interest rates {i}") for i in range(3)))
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "3/minute"}}
    # The sync and the async page share one count per client, with the API's search/.
    codes = [
        client.get(url, {"q": "interest rates"}).status_code
        for url in ("/search/", "/async/", "/search/")
    ]
    assert codes == [200, 200, 200]
    for url in ("/search/", "/async/"):
        over = client.get(url, {"q": "interest rates"})
        assert over.status_code == 429 and int(over["Retry-After"]) >= 1
        assert over.context["unavailable"] and not over.context["searched"]
    assert client.get("/search/").status_code == 200  # the form alone: no search, not counted
    # Staff users are not counted; a view with throttle_scope None is not throttled.
    client.force_login(User.objects.create_user("editor", is_staff=True))
    assert client.get("/search/", {"q": "interest rates"}).status_code == 200
    client.logout()
    monkeypatch.setattr(search.SearchView, "throttle_scope", None)
    assert client.get("/search/", {"q": "interest rates"}).status_code == 200
    settings.SBERT = {**settings.SBERT, "RATES": {"search": None}}

    # Highlighting: the page's sentences are encoded up to MAX_HIGHLIGHT_SENTENCES, in order.
    Report.objects.bulk_create(Report(title=f"report {i}", body=SENTENCES) for i in range(4))
    indexing.embed_stale(indexing.get_ref("testapp.Report", "embedding"))
    encoded: list[int] = []
    real = highlight.encode_texts
    monkeypatch.setattr(
        highlight,
        "encode_texts",
        lambda texts, *a, **k: encoded.append(len(texts)) or real(texts, *a, **k),
    )
    monkeypatch.setattr(search, "MAX_HIGHLIGHT_SENTENCES", 9)
    response = client.get("/reports/", {"q": "interest rates", "mode": "vector"})
    rows = list(response.context["page_obj"])
    per_row = len(highlight.sentence_spans(rows[0].passage["text"]))
    assert len(rows) == 4 and per_row >= 2
    assert encoded == [per_row * (9 // per_row)] and encoded[0] <= 9
    marked = [bool(getattr(row, "snippet", None)) for row in rows]
    assert marked == [i < 9 // per_row for i in range(4)]
