"""Clicks and conversions: events/ and sbert/click/, signed tokens, once per (search, row,
kind), throttling, the kinds a site accepts."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from django.core import signing
from django.test import override_settings

from django_sbert.feedback import make_token, tokens
from django_sbert.feedback.tokens import SALT
from django_sbert.models import SearchEvent, SearchLog
from tests.feedback.conftest import search_url
from tests.request_bodies import CountingPayload

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.feedback.urls")]

EVENTS = "/api/sbert/events/"
CLICK = "/sbert/click/"


@pytest.fixture
def logged(client, articles, registered, log_on) -> dict:
    """A logged REST search of five results."""
    registered()
    response = client.get(search_url(k=5))
    assert response.status_code == 200
    return response.json()


def post(client, url: str, **data):
    return client.post(url, json.dumps(data), content_type="application/json")


def test_a_click_is_stored_with_the_search_row_position_and_client(client, logged):
    result = logged["results"][1]
    response = post(client, EVENTS, token=result["click_token"], dwell_ms=4200)
    assert response.status_code == 202, response.content
    event = SearchEvent.objects.get()
    search = SearchLog.objects.get()
    assert str(event.search_id) == logged["search_id"]
    assert (event.object_pk, event.position, event.kind) == (str(result["id"]), 2, "click")
    assert event.dwell_ms == 4200
    assert event.client == search.client


def test_a_repeated_click_is_stored_once(client, logged):
    token = logged["results"][0]["click_token"]
    for _ in range(3):
        assert post(client, EVENTS, token=token, kind="click").status_code == 202
    # the plain view, form-encoded as navigator.sendBeacon sends it: the same event
    assert client.post(CLICK, {"token": token, "kind": "click"}).status_code == 202
    assert SearchEvent.objects.count() == 1


def test_a_token_signed_with_another_key_is_refused_and_nothing_stored(client, logged):
    result = logged["results"][0]
    with override_settings(SECRET_KEY="another-site-entirely-another-key"):
        forged = make_token(uuid.UUID(logged["search_id"]), result["id"], 1)
    for url in (EVENTS, CLICK):
        response = post(client, url, token=forged)
        assert response.status_code == 400
        assert "not valid" in response.json()["detail"]
    assert not SearchEvent.objects.exists()


def test_an_edited_token_for_another_row_or_position_is_refused(client, logged):
    token = logged["results"][0]["click_token"]
    search, position, rest = token.split(":", 2)
    pk, timestamp, signature = rest.rsplit(":", 2)
    assert (position, pk) == ("1", str(logged["results"][0]["id"]))
    for edit in (f"{search}:{position}:999999", f"{search}:4:{pk}"):
        # the payload of another row (or position), with the original timestamp and signature
        response = post(client, EVENTS, token=f"{edit}:{timestamp}:{signature}")
        assert response.status_code == 400, response.content
    response = post(client, CLICK, token=token[:-2] + ("A" if token[-2] != "A" else "B") + "x")
    assert response.status_code == 400
    assert not SearchEvent.objects.exists()


def test_a_token_in_the_earlier_json_form_is_still_read(client, logged):
    result = logged["results"][1]
    old = signing.dumps([uuid.UUID(logged["search_id"]).hex, str(result["id"]), 2], salt=SALT)
    assert post(client, CLICK, token=old).status_code == 202
    event = SearchEvent.objects.get()
    assert (event.object_pk, event.position) == (str(result["id"]), 2)
    malformed = signing.dumps(["not", "a token"], salt=SALT)
    response = post(client, EVENTS, token=malformed)
    assert response.status_code == 400 and "not a click token" in response.json()["detail"]


@pytest.mark.heavy
def test_an_expired_token_is_refused(client, logged, feedback, monkeypatch):
    token = logged["results"][0]["click_token"]
    monkeypatch.setattr(tokens, "TOKEN_MAX_AGE", 1)
    feedback()
    time.sleep(2.1)
    response = post(client, EVENTS, token=token)
    assert response.status_code == 400 and "expired" in response.json()["detail"]
    assert not SearchEvent.objects.exists()


def test_conversions_are_accepted_only_when_configured(client, logged, feedback):
    token = logged["results"][0]["click_token"]
    response = post(client, EVENTS, token=token, kind="add_to_cart")
    assert response.status_code == 400
    assert "add_to_cart" in response.json()["detail"] and "click" in response.json()["detail"]
    assert not SearchEvent.objects.exists()
    feedback(CONVERSIONS=["add_to_cart"])
    assert post(client, EVENTS, token=token, kind="add_to_cart").status_code == 202
    assert post(client, EVENTS, token=token, kind="click").status_code == 202
    kinds = sorted(SearchEvent.objects.values_list("kind", flat=True))
    assert kinds == ["add_to_cart", "click"]  # one of each for the same result


def test_events_past_the_clients_rate_get_429_and_are_not_stored(client, logged, feedback):
    feedback(rates={"clicks": "3/minute"})
    tokens = [r["click_token"] for r in logged["results"]]
    codes = [post(client, EVENTS, token=t).status_code for t in tokens[:3]]
    codes.append(client.post(CLICK, {"token": tokens[3]}).status_code)  # shared count
    assert codes == [202, 202, 202, 429]
    assert SearchEvent.objects.count() == 3


def test_bad_bodies_get_messages(client, logged):
    token = logged["results"][0]["click_token"]
    assert post(client, EVENTS).status_code == 400
    response = post(client, EVENTS, token=token, dwell_ms=-5)
    assert response.status_code == 400 and "dwell_ms" in response.json()
    response = post(client, EVENTS, token=token, tokn="x")
    assert response.status_code == 400 and "tokn" in response.json()
    response = client.post(CLICK, "not json", content_type="application/json")
    assert response.status_code == 400 and "JSON" in response.json()["detail"]
    assert client.get(CLICK).status_code == 405
    assert client.post(CLICK, {"token": token, "dwell_ms": "soon"}).status_code == 400
    assert not SearchEvent.objects.exists()


@pytest.mark.parametrize("url", [EVENTS, CLICK])
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_visitors_large_body_is_a_json_413_before_any_of_it_is_read(
    client, logged, url, content_type, caplog
):
    """Anyone can post events: a body over Django's own bound (2.5 MB) must not be read, nor
    answer Django's HTML 400 with a security error logged, which a script could repeat."""
    token = logged["results"][0]["click_token"]
    if content_type == "application/json":
        body = json.dumps({"token": token, "kind": "click", "pad": "x" * 3_000_000}).encode()
    else:
        body = f"token={token}&kind=click&pad={'x' * 3_000_000}".encode()
    payload = CountingPayload(body)
    response = client.generic(
        "POST", url, body, content_type=content_type, **{"wsgi.input": payload}
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert "body" in response.json()["detail"].lower()
    assert payload.read_bytes == 0
    assert not [r for r in caplog.records if r.name.startswith("django.security")]
    assert not SearchEvent.objects.exists()


def test_a_click_without_a_length_is_read_to_its_bound_only(logged):
    """Under ASGI a chunked body has no Content-Length and Django hands the view all of it:
    sbert/click/ still reads one byte past its 4 KB, then answers 413."""
    from django.core.handlers.asgi import ASGIRequest

    from django_sbert.views.click import MAX_BODY, click

    token = logged["results"][0]["click_token"]
    payload = CountingPayload(json.dumps({"token": token, "pad": "x" * 100_000}).encode())
    scope = {
        "type": "http",
        "method": "POST",
        "path": CLICK,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],  # no content-length
    }
    response = click(ASGIRequest(scope, payload))
    assert response.status_code == 413
    assert payload.read_bytes == MAX_BODY + 1
    assert not SearchEvent.objects.exists()


@pytest.mark.parametrize("url", [EVENTS, CLICK])
def test_json_nested_too_deeply_is_a_json_400(client, logged, url, caplog):
    response = client.post(url, "[" * 4000, content_type="application/json")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("url", [EVENTS, CLICK])
def test_a_form_of_too_many_fields_is_a_json_400(client, logged, url, caplog):
    response = client.post(
        url, "a&" * 2000, content_type="application/x-www-form-urlencoded"
    )  # 4,000 bytes, 2,000 fields: over Django's DATA_UPLOAD_MAX_NUMBER_FIELDS
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert not [r for r in caplog.records if r.name.startswith("django.security")]
    assert not SearchEvent.objects.exists()


def test_a_click_on_a_purged_search_is_refused(client, logged):
    token = logged["results"][0]["click_token"]
    SearchLog.objects.all().delete()
    response = post(client, EVENTS, token=token)
    assert response.status_code == 410
    assert not SearchEvent.objects.exists()


def test_with_the_log_off_events_are_refused(client, logged, settings):
    token = logged["results"][0]["click_token"]
    settings.SBERT = {**settings.SBERT, "FEEDBACK": {"LOG": False}}
    assert post(client, EVENTS, token=token).status_code == 404
    assert client.post(CLICK, {"token": token}).status_code == 404
    assert not SearchEvent.objects.exists()


def test_crawlers_clicks_are_ignored(client, logged):
    token = logged["results"][0]["click_token"]
    body = json.dumps({"token": token})
    agent = "Mozilla/5.0 (compatible; bingbot/2.0)"
    response = client.post(EVENTS, body, content_type="application/json", HTTP_USER_AGENT=agent)
    assert response.status_code == 202
    assert not SearchEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_an_event_is_one_statement_and_kept_once(client, articles, log_on):
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from django_sbert.feedback import log_search
    from tests.testapp.models import Article

    hits = list(Article.objects.similar_to("a dog")[:3])
    entry = log_search(RequestFactory().get("/mine/"), hits, query="a dog", mode="vector")
    token = hits[2].sbert_click_token
    with CaptureQueriesContext(connection) as queries:
        assert client.post(CLICK, {"token": token, "kind": "click"}).status_code == 202
    writes = [q["sql"] for q in queries.captured_queries if "searchevent" in q["sql"]]
    assert len(writes) == 1 and writes[0].startswith("WITH")
    assert not [q for q in queries.captured_queries if q["sql"].split()[0] in ("BEGIN", "COMMIT")]
    assert post(client, EVENTS, token=token, kind="click").status_code == 202  # again: kept once
    event = SearchEvent.objects.get()
    assert (event.search_id, event.object_pk, event.position) == (entry.pk, str(hits[2].pk), 3)
    assert event.client == entry.client and event.dwell_ms is None
    SearchLog.objects.all().delete()
    assert post(client, EVENTS, token=hits[0].sbert_click_token).status_code == 410
    assert not SearchEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_click_faster_than_its_searchs_write_waits_for_it(articles, log_on, rf):
    """The search's row is written after its response is sent; a click that arrives before it
    is held a moment, then stored, not refused as gone."""
    import threading

    from django.db import connection

    from django_sbert.feedback import log_search, record_event, write_after_response
    from tests.testapp.models import Article

    request = rf.get("/mine/")
    hits = list(Article.objects.similar_to("guitar music")[:2])
    log_search(request, hits, query="guitar music", defer=True)
    token = hits[0].sbert_click_token

    def send_later() -> None:
        time.sleep(0.06)
        try:
            write_after_response(request, None)
        finally:
            connection.close()

    writer = threading.Thread(target=send_later)
    writer.start()
    try:
        assert record_event(rf.post("/sbert/click/"), token) is True
    finally:
        writer.join()
    assert SearchEvent.objects.get().object_pk == str(hits[0].pk)
