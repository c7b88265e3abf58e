"""The search log: REST search/, the search page and log_search(), sampling, crawlers, rates,
and nothing at all with the log off."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.client import RequestFactory
from django.test.utils import CaptureQueriesContext

from django_sbert.feedback import client_key_for_user, log, log_search, normalize_query, read_token
from django_sbert.models import SearchLog
from django_sbert.serving import serving_version
from tests.api.conftest import plant
from tests.feedback.conftest import search_url
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]


def test_a_rest_search_is_logged_with_its_first_page_and_click_tokens(
    client, articles, registered, log_on
):
    registered()
    plant(articles[3], "a cat and a dog")
    response = client.get(search_url("  A Cat  and a DOG ", k=5, page_size=3))
    assert response.status_code == 200, response.json()
    body = response.json()
    entry = SearchLog.objects.get()
    assert body["search_id"] == str(entry.pk)
    assert entry.query == "A Cat  and a DOG"  # DRF trims; inner spaces stay
    assert entry.normalized == "a cat and a dog"
    assert entry.mode == "vector"
    assert entry.model_label == "testapp.Article"
    assert entry.field == "embedding"
    assert entry.encoder_name == "default"
    assert entry.version == serving_version("default")
    assert entry.latency_ms is not None and entry.latency_ms > 0
    shown = body["results"]
    assert len(shown) == 3  # the first page, not all k
    assert entry.results == [
        [str(r["id"]), i, pytest.approx(r["similarity"], abs=1e-5)] for i, r in enumerate(shown, 1)
    ]
    assert entry.result_count == 3
    for position, result in enumerate(shown, 1):
        target = read_token(result["click_token"])
        assert (target.search_id, target.object_pk, target.position) == (
            entry.pk,
            str(result["id"]),
            position,
        )


def test_the_filters_are_stored_as_a_digest_that_tells_them_apart(
    client, articles, registered, log_on
):
    registered()
    client.get(search_url(k=5))
    client.get(search_url(k=5))
    client.get(search_url(k=3))
    first, second, third = SearchLog.objects.order_by("created_at")
    assert first.filters_digest == second.filters_digest != third.filters_digest
    assert len(first.filters_digest) == 64


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_keyword_and_hybrid_searches_log_their_mode_and_score(
    client, articles, registered, log_on, mode
):
    registered()
    response = client.get(search_url("interest rates", mode=mode))
    assert response.status_code == 200, response.json()
    entry = SearchLog.objects.get()
    assert entry.mode == mode
    score = "keyword_score" if mode == "keyword" else "score"
    results = response.json()["results"]
    assert results, "the words are in two articles"
    assert [row[2] for row in entry.results] == [pytest.approx(r[score], abs=1e-5) for r in results]
    assert entry.version == ("" if mode == "keyword" else serving_version("default"))


def test_later_pages_are_not_logged_and_carry_no_tokens(client, articles, registered, log_on):
    registered()
    response = client.get(search_url(k=6, page_size=3, page=2))
    assert response.status_code == 200
    body = response.json()
    assert body["search_id"] is None
    assert all("click_token" not in r for r in body["results"])
    assert not SearchLog.objects.exists()


def test_the_client_is_a_keyed_hash_of_the_user_never_the_address(
    client, articles, registered, log_on, django_user_model
):
    registered()
    user = django_user_model.objects.create_user("reader")
    client.force_login(user)
    client.get(search_url(), REMOTE_ADDR="203.0.113.9")
    entry = SearchLog.objects.get()
    assert entry.client == client_key_for_user(user) == client_key_for_user(user.pk)
    stored = " ".join(str(v) for v in SearchLog.objects.values().get().values())
    assert "203.0.113.9" not in stored and "reader" not in stored


def test_the_query_is_cut_to_max_query_length(client, articles, registered, feedback, monkeypatch):
    monkeypatch.setattr(log, "MAX_QUERY_LENGTH", 10)
    feedback()
    registered()
    client.get(search_url("central banks raise interest rates"))
    assert SearchLog.objects.get().query == "central ba"


def test_the_search_page_logs_its_first_page(client, articles, feedback):
    feedback()
    plant(articles[4], "the dog runs fast")
    response = client.get("/shallow/", {"q": "the dog runs fast", "mode": "vector"})
    assert response.status_code == 200
    entry = response.context["search_log"]
    assert entry is not None and SearchLog.objects.get() == entry
    assert entry.mode == "vector" and entry.field == "embedding"
    assert entry.version == serving_version("default")
    page = list(response.context["page_obj"])
    assert [row[0] for row in entry.results] == [str(hit.pk) for hit in page]
    assert entry.results[0][0] == str(articles[4].pk)
    assert all(read_token(hit.sbert_click_token).search_id == entry.pk for hit in page)
    # page 2 of the same search: not a second search
    client.get("/shallow/", {"q": "the dog runs fast", "mode": "vector", "page": 2})
    assert SearchLog.objects.count() == 1


def test_log_search_from_a_view_of_ones_own(articles, log_on, rf: RequestFactory):
    request = rf.get("/mine/")
    request.session = type("Session", (), {"session_key": "abc123"})()
    hits = list(Article.objects.similar_to("the court and the law")[:4])
    entry = log_search(request, hits, query="The Court  and the law", mode="vector")
    assert entry is not None
    stored = SearchLog.objects.get()
    assert stored.normalized == normalize_query("the court and the law")
    assert stored.model_label == "testapp.Article"
    assert [row[:2] for row in stored.results] == [[str(h.pk), i] for i, h in enumerate(hits, 1)]
    assert all(read_token(h.sbert_click_token).object_pk == str(h.pk) for h in hits)
    with pytest.raises(ValueError, match="use one of"):
        log_search(request, hits, query="x", mode="semantic")


def test_sample_rate_zero_logs_nothing(client, articles, registered, feedback):
    feedback(LOG=0.0)
    registered()
    response = client.get(search_url())
    assert response.status_code == 200
    assert response.json()["search_id"] is None
    assert not SearchLog.objects.exists()


def test_crawlers_are_served_but_not_logged(client, articles, registered, log_on):
    registered()
    agent = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    response = client.get(search_url(), HTTP_USER_AGENT=agent)
    assert response.status_code == 200 and response.json()["results"]
    assert not SearchLog.objects.exists()
    client.get(search_url(), HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0")
    assert SearchLog.objects.count() == 1


def test_a_client_past_its_rate_is_served_but_not_logged(client, articles, registered, feedback):
    feedback(rates={"logging": "2/minute"})
    registered()
    for _ in range(4):
        assert client.get(search_url(), REMOTE_ADDR="198.51.100.7").status_code == 200
    assert SearchLog.objects.count() == 2
    client.get(search_url(), REMOTE_ADDR="198.51.100.8")  # another client: its own count
    assert SearchLog.objects.count() == 3


def test_with_the_log_off_nothing_touches_the_log(client, articles, registered, settings):
    registered()
    client.get(search_url())  # warm: the encoder and serving version are read once
    with CaptureQueriesContext(connection) as queries:
        response = client.get(search_url())
        page = client.get("/search/", {"q": "interest rates"})
    assert response.status_code == 200 and page.status_code == 200
    body = response.json()
    assert "search_id" not in body and all("click_token" not in r for r in body["results"])
    assert "data-sbert-click" not in page.content.decode()
    table = SearchLog._meta.db_table
    assert queries.captured_queries, "the searches ran"
    assert not [q for q in queries.captured_queries if table in q["sql"]]
    assert not SearchLog.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_log_commits_without_waiting_for_the_disk_alone(articles, log_on):
    from django.test import RequestFactory

    request = RequestFactory().get("/mine/")
    hits = list(Article.objects.similar_to("a dog")[:3])
    with CaptureQueriesContext(connection) as queries:
        entry = log_search(request, hits, query="a dog", mode="vector")
    statements = [q["sql"] for q in queries.captured_queries]
    assert [s.split()[0] for s in statements if "INSERT" in s] == ["INSERT"]  # one write
    assert statements[0] == "SELECT set_config('synchronous_commit', 'off', true)"
    assert not [s for s in statements if s.split()[0] in ("BEGIN", "COMMIT", "SAVEPOINT")]
    with connection.cursor() as cursor:  # the request's own work commits as configured
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    assert SearchLog.objects.get().pk == entry.pk


@pytest.mark.parametrize("path", ["/api/sbert/search/", "/shallow/"])
def test_the_search_is_written_once_its_response_is_sent_not_before(
    articles, registered, log_on, path
):
    """The REST API and SearchView write their log row in the response's close(), which the
    server calls after sending the body; the answer already carries the search's id."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections
    from django.test.client import RequestFactory as Factory

    registered()
    plant(articles[2], "tax and the government")
    params = {"model": "testapp.article", "q": "tax and the government", "mode": "vector"}
    environ = Factory().get(path, params).environ
    sent: dict = {}
    # As Django's test client does: the test's transaction keeps its connection open.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        response = WSGIHandler()(environ, lambda status, headers: sent.update(status=status))
        body = b"".join(response)  # what the server sends, before it calls close()
        assert sent["status"].startswith("200") and body
        assert not SearchLog.objects.exists()
        response.close()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    entry = SearchLog.objects.get()
    if path.startswith("/api/"):
        import json

        assert json.loads(body)["search_id"] == str(entry.pk)
    assert entry.results[0][0] == str(articles[2].pk)


def test_log_search_deferred_without_a_response_to_close_writes_at_once(
    articles, log_on, rf: RequestFactory
):
    from django_sbert.feedback import write_after_response

    request = rf.get("/mine/")
    hits = list(Article.objects.similar_to("court and law")[:3])
    entry = log_search(request, hits, query="court and law", defer=True)
    assert entry is not None and not SearchLog.objects.exists()
    write_after_response(request, None)
    assert SearchLog.objects.get().pk == entry.pk
