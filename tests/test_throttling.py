"""The one throttle module under every rate of the package: a rate parsed one way, a client
named one way, a window counted one way (Django's cache, as DRF's SimpleRateThrottle keeps it)."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

from django_sbert import throttling
from django_sbert.throttling import client_ident, count, count_all, count_key, parse_rate


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.mark.parametrize(
    ("rate", "parsed"),
    [("60/minute", (60, 60)), ("1/s", (1, 1)), ("5/hour", (5, 3600)), ("2/day", (2, 86400))],
)
def test_a_rate_is_requests_and_seconds(rate, parsed):
    assert parse_rate(rate, "X") == parsed


@pytest.mark.parametrize("rate", ["60", "sixty/minute", "60/fortnight", "-1/minute", "６/minute"])
def test_a_malformed_rate_names_its_setting(rate):
    with pytest.raises(ImproperlyConfigured, match=r"SBERT\[\"RATES\"\]\['health'\]"):
        parse_rate(rate, throttling.rate_setting("health"))


@pytest.mark.django_db
def test_a_client_is_its_user_else_its_session_where_asked_else_its_address():
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.4")
    request.user = AnonymousUser()
    assert client_ident(request) == "ip-192.0.2.4"
    request.session = type("Session", (), {"session_key": "abcdefgh12345678"})()
    assert client_ident(request) == "ip-192.0.2.4"  # the HTTP throttles leave sessions out
    assert client_ident(request, sessions=True) == "session-abcdefgh12345678"
    request.user = User.objects.create(username="reader")
    assert (
        client_ident(request, sessions=True) == client_ident(request) == f"user-{request.user.pk}"
    )


def test_a_window_refuses_past_its_budget_and_says_how_long_to_wait():
    assert [count("p", "ip-192.0.2.4", 2, 60) for _ in range(2)] == [None, None]
    wait = count("p", "ip-192.0.2.4", 2, 60)
    assert wait is not None and 1 <= wait <= 60
    assert len(cache.get(count_key("p", "ip-192.0.2.4"))) == 2  # the refused one not recorded
    assert count("p", "ip-192.0.2.5", 2, 60) is None  # another client
    assert count("q", "ip-192.0.2.4", 2, 60) is None  # another prefix


def test_several_windows_are_counted_together_each_against_its_budget():
    budgets = [("session-a", 1), ("net-192.0.2.0/24", 3)]
    assert count_all("p", budgets, 60) == [None, None]
    client, network = count_all("p", budgets, 60)
    assert client is not None and network is None  # the network still counts this one
    assert len(cache.get(count_key("p", "net-192.0.2.0/24"))) == 2
    assert count_all("p", [("session-b", 1), ("net-192.0.2.0/24", 3)], 60) == [None, None]
    assert count_all("p", [("session-c", 1), ("net-192.0.2.0/24", 3)], 60)[1] is not None


def test_a_window_slides():
    assert count("p", "c", 1, 1) is None
    assert count("p", "c", 1, 1) == 1
    time.sleep(1.05)
    assert count("p", "c", 1, 1) is None


def test_every_rate_is_read_in_one_place(settings):
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "7/minute", "health": "8/minute"}}
    assert throttling.rate("search") == "7/minute"
    assert throttling.rate("suggest") == "600/minute"  # merged: the other scopes keep theirs
    assert throttling.rate("health") == "8/minute"
    assert throttling.rate("logging") == "60/minute"
