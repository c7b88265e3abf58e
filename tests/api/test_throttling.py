"""Throttling of search/, similar/ and embed/: defaults on, rates are settings, None is off."""

from __future__ import annotations

import json

import pytest

from django_sbert.api.settings import API_DEFAULTS

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

SEARCH = "/api/sbert/search/?model=testapp.article&q=dog"


def test_defaults_are_on():
    assert API_DEFAULTS["THROTTLE_RATES"] == {"search": "120/minute", "embed": "30/minute"}


def test_search_and_similar_share_the_search_rate(client_as, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "API": {"THROTTLE_RATES": {"search": "2/minute"}}}
    client = client_as("user")
    assert client.get(SEARCH).status_code == 200
    assert client.get(f"/api/sbert/similar/testapp.article/{articles[0].pk}/").status_code == 200
    throttled = client.get(SEARCH)
    assert throttled.status_code == 429
    assert int(throttled["Retry-After"]) > 0
    assert client_as("staff").get(SEARCH).status_code == 200  # counted per user


def test_anonymous_clients_are_counted_by_address(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "API": {"THROTTLE_RATES": {"search": "1/minute"}}}
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1").status_code == 200
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1").status_code == 429
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.2").status_code == 200


def test_embed_rate_and_none_turns_it_off(client_as, settings):
    client = client_as("user")

    def embed():
        body = json.dumps({"texts": ["a dog"]})
        return client.post("/api/sbert/embed/", body, content_type="application/json")

    settings.SBERT = {**settings.SBERT, "API": {"THROTTLE_RATES": {"embed": "1/minute"}}}
    assert embed().status_code == 200
    assert embed().status_code == 429
    settings.SBERT = {**settings.SBERT, "API": {"THROTTLE_RATES": {"embed": None}}}
    assert embed().status_code == 200
