"""search/ and similar/ when a part is away: 503 with a message the client can act on, a request
id and Retry-After, never a 500, a hung worker, or the server's insides in the body.

The slow statement is real: the registered queryset has a filter that sleeps in PostgreSQL for
each row it checks, so the search runs past a short STATEMENT_TIMEOUT and is cancelled. So is
the version this host cannot serve: its weights changed in the model storage after it was saved.
"""

from __future__ import annotations

import re

import pytest
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from django_sbert.api import registry
from tests.api.conftest import plant
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.api.urls")]

SEARCH = "/api/sbert/search/"


def slow_rows(request) -> object:
    """Every article, through a filter that takes 50 ms a row inside PostgreSQL."""
    return Article.objects.filter(
        RawSQL("pg_sleep(0.05) IS NOT NULL", [], output_field=BooleanField())
    )


@pytest.fixture
def short_timeout(settings):
    settings.SBERT = {**settings.SBERT, "SEARCH": {"STATEMENT_TIMEOUT": 0.02}}


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_search_cancelled_at_the_statement_timeout_answers_503_with_a_clear_message(
    api_client, articles, registered, short_timeout, mode
):
    registered(queryset=slow_rows)
    response = api_client.get(
        SEARCH, {"model": "testapp.article", "q": "interest rates", "mode": mode}
    )
    assert response.status_code == 503, response.content
    detail = response.json()["detail"]
    assert detail == (
        "The search ran longer than this site allows (0.02 s) and was cancelled. "
        "Try a more specific query, or try again later."
    )
    assert response["Retry-After"].isdigit()


def test_similar_items_cancelled_at_the_statement_timeout_answer_503(
    api_client, articles, registered, short_timeout
):
    registered(queryset=slow_rows)
    response = api_client.get(f"/api/sbert/similar/testapp.article/{articles[0].pk}/")
    assert response.status_code == 503, response.content
    assert "ran longer than this site allows" in response.json()["detail"]


def test_after_a_cancelled_search_the_next_one_is_answered(
    api_client, articles, registered, settings
):
    """The cancelled statement leaves the process's connection usable: no 500 follows."""
    plant(articles[3], "a cat and a dog")
    registered(queryset=slow_rows)
    settings.SBERT = {**settings.SBERT, "SEARCH": {"STATEMENT_TIMEOUT": 0.02}}
    params = {"model": "testapp.article", "q": "a cat and a dog", "k": 3}
    assert api_client.get(SEARCH, params).status_code == 503
    registry.unregister(Article)
    registered()  # the same model, now without the slow filter
    settings.SBERT = {**settings.SBERT, "SEARCH": {"STATEMENT_TIMEOUT": 5}}
    response = api_client.get(SEARCH, params)
    assert response.status_code == 200, response.content
    assert response.json()["results"][0]["id"] == articles[3].pk


# --- what a client reads when the serving version cannot be loaded ---------------------------


@pytest.fixture
def corrupt_serving_version(settings, tmp_path, tiny_encoder):
    """The serving version's weights, changed in the model storage after it was saved: this
    host cannot verify them, and the reason names the storage, its paths and sha256 sums."""

    from django.core.files.storage import FileSystemStorage

    from django_sbert import serving
    from django_sbert.models import EncoderVersion, VersionStatus
    from tests.serving.failing_storage import use_storage
    from tests.serving.test_health import perturbed

    store = tmp_path / "bucket-of-example-co"
    use_storage(settings, store, FileSystemStorage, tmp_path / "host-cache")
    key, version = serving.save_encoder(perturbed(tiny_encoder, seed=61), "default", "tiny")
    weights = store / key / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    EncoderVersion.objects.create(
        encoder_name="default", version=version, directory=key, status=VersionStatus.ACTIVE
    )
    yield version, store
    serving.forget_serving()
    serving.reset_encoders()


def test_an_anonymous_503_names_nothing_of_the_server_but_a_request_id_in_the_log(
    api_client, articles, registered, corrupt_serving_version, caplog, client_as
):
    version, store = corrupt_serving_version
    registered()
    response = api_client.get(SEARCH, {"model": "testapp.article", "q": "interest rates"})
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["detail"] == (
        "Search is unavailable on this server for a moment; try again shortly."
    )
    text = response.content.decode()
    for secret in (version, str(store), "FileSystemStorage", "sha256", "VersionUnavailable"):
        assert secret not in text
    assert re.fullmatch(r"[0-9a-f]{32}", body["request_id"])
    assert response["X-Request-ID"] == body["request_id"] and response["Retry-After"].isdigit()
    # The details are in the log, under the same id, for whoever runs the site.
    logged = [r.getMessage() for r in caplog.records if body["request_id"] in r.getMessage()]
    assert len(logged) == 1
    assert version in logged[0] and "sha256" in logged[0] and "FileSystemStorage" in logged[0]

    # Staff run the site: they read the reason itself.
    staff = client_as("staff").get(SEARCH, {"model": "testapp.article", "q": "interest rates"})
    assert staff.status_code == 503 and version in staff.json()["detail"]


@pytest.mark.heavy
def test_a_search_refused_by_a_full_query_server_answers_503_with_its_retry_after(
    api_client, articles, registered, settings, tmp_path, monkeypatch
):
    """The host's query server holds --max-queue texts already: the next search is refused at
    once (back-pressure), not queued and not encoded in the web process instead."""
    import threading

    from django.db import connection

    from django_sbert.serving import query_client, query_vector
    from tests.query_server_process import QueryServerProcess

    server = QueryServerProcess(tmp_path, max_queue=1, window_ms=3000, retry_after=2)
    settings.SBERT = {**settings.SBERT, "QUERY_SERVER": {"SOCKET": server.socket}}
    monkeypatch.setattr(query_client, "TIMEOUT", 30.0)
    registered()

    def waiting_search() -> None:
        try:
            query_vector("interest rates fall")  # waits out the server's 3 s window
        finally:
            query_client.close_connection()
            connection.close()

    first = threading.Thread(target=waiting_search)
    try:
        first.start()
        while server.stats()["waiting"] < 1:
            assert first.is_alive()
        response = api_client.get(SEARCH, {"model": "testapp.article", "q": "cats and dogs"})
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == "2"
        assert response.json()["detail"] == "Search is busy on this server; try again in a moment."
        first.join()
        stats = server.stats()
        assert (stats["busy"], stats["encoded"]) == (1, 1)
        again = api_client.get(SEARCH, {"model": "testapp.article", "q": "cats and dogs"})
        assert again.status_code == 200, again.content
    finally:
        first.join()
        query_client.close_connection()
        server.stop()
