"""Throttling of search/, similar/ and embed/: defaults on, rates are settings, None is off."""

from __future__ import annotations

import json

import pytest

from django_sbert.conf import DEFAULTS

API_SCOPES = ("search", "suggest", "embed", "schema")

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

SEARCH = "/api/sbert/search/?model=testapp.article&q=dog"


def test_defaults_are_on():
    assert {scope: DEFAULTS["RATES"][scope] for scope in API_SCOPES} == {
        "search": "120/minute",
        "suggest": "600/minute",
        "embed": "30/minute",
        "schema": "60/minute",
    }


def test_search_and_similar_share_the_search_rate(client_as, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "2/minute"}}
    client = client_as("user")
    assert client.get(SEARCH).status_code == 200
    assert client.get(f"/api/sbert/similar/testapp.article/{articles[0].pk}/").status_code == 200
    throttled = client.get(SEARCH)
    assert throttled.status_code == 429
    assert int(throttled["Retry-After"]) > 0
    assert client_as("staff").get(SEARCH).status_code == 200  # counted per user


def test_anonymous_clients_are_counted_by_address(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "1/minute"}}
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1").status_code == 200
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1").status_code == 429
    assert api_client.get(SEARCH, REMOTE_ADDR="10.0.0.2").status_code == 200


def test_embed_rate_and_none_turns_it_off(client_as, settings):
    client = client_as("user")

    def embed():
        body = json.dumps({"texts": ["a dog"]})
        return client.post("/api/sbert/embed/", body, content_type="application/json")

    settings.SBERT = {**settings.SBERT, "RATES": {"embed": "1/minute"}}
    assert embed().status_code == 200
    assert embed().status_code == 429
    settings.SBERT = {**settings.SBERT, "RATES": {"embed": None}}
    assert embed().status_code == 200


def test_a_new_x_forwarded_for_per_request_does_not_reset_the_count(
    api_client, articles, registered, settings
):
    """No proxy is trusted by default: X-Forwarded-For is the client's to invent."""
    registered()
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "1/minute"}}
    first = api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.1.1.1")
    assert first.status_code == 200
    second = api_client.get(SEARCH, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="2.2.2.2")
    assert second.status_code == 429


def test_num_proxies_takes_the_address_the_trusted_proxy_saw(
    api_client, articles, registered, settings
):
    registered()
    api = {"NUM_PROXIES": 1}
    settings.SBERT = {**settings.SBERT, "API": api, "RATES": {"search": "1/minute"}}
    proxy = "10.0.0.1"  # every request reaches the site through this one proxy

    def get(forwarded):
        return api_client.get(SEARCH, REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR=forwarded)

    assert get("spoofed-1, 203.0.113.7").status_code == 200
    # The client can prepend what it likes; the proxy's own entry (the rightmost) counts.
    assert get("spoofed-2, 203.0.113.7").status_code == 429
    assert get("203.0.113.8").status_code == 200  # another client behind the same proxy


@pytest.mark.parametrize("value", [-1, "1", 1.5, True])
def test_num_proxies_must_be_a_count(value, settings):
    from django.core.exceptions import ImproperlyConfigured
    from rest_framework.test import APIRequestFactory

    from django_sbert.throttling import client_address

    settings.SBERT = {**settings.SBERT, "API": {"NUM_PROXIES": value}}
    request = APIRequestFactory().get("/", HTTP_X_FORWARDED_FOR="1.1.1.1")
    with pytest.raises(ImproperlyConfigured, match="NUM_PROXIES"):
        client_address(request)


@pytest.mark.parametrize("num_proxies", [None, 1])
def test_a_huge_x_forwarded_for_makes_a_short_cache_key(num_proxies, settings):
    import warnings

    from django.core.cache import CacheKeyWarning
    from django.core.cache.backends.base import memcache_key_warnings
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from django_sbert.api.throttling import SearchRateThrottle

    settings.SBERT = {**settings.SBERT, "API": {"NUM_PROXIES": num_proxies}}
    forwarded = "a" * 5000 + " " + "b" * 5000  # 10 kB in one "address", a space in it
    request = Request(APIRequestFactory().get("/", HTTP_X_FORWARDED_FOR=forwarded))
    request.user = None
    key = SearchRateThrottle().get_cache_key(request, view=None)
    assert len(key) < 100
    assert not list(memcache_key_warnings(key))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheKeyWarning)  # LocMemCache warns as Memcached fails
        assert SearchRateThrottle().allow_request(request, view=None)


def test_a_huge_x_forwarded_for_is_not_an_error(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "API": {"NUM_PROXIES": 2}}
    response = api_client.get(SEARCH, HTTP_X_FORWARDED_FOR="x" * 10_000)
    assert response.status_code == 200
