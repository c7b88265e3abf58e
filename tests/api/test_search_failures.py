"""search/ and similar/ when PostgreSQL cancels the search at the statement timeout: 503 with a
message the client can act on and Retry-After, never a 500 or a hung worker (issue 14, item 9).

The slow statement is real: the registered queryset has a filter that sleeps in PostgreSQL for
each row it checks, so the search runs past a short STATEMENT_TIMEOUT and is cancelled.
"""

from __future__ import annotations

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
