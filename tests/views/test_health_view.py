"""Who reads what at ``sbert/health/``: anonymous callers the status only, staff users and the
bearer of ``SBERT["HEALTH"]["TOKEN"]`` every check's reason; each client throttled.

The process is cold (nothing warmed), so the view answers 503 with a reason that names the
serving version, as it does on a host that cannot fetch the version (with the storage and its
paths then) or whose database refuses (with the driver's message: host, port, user).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from django_sbert import serving
from django_sbert.serving.warmup import forget_warm_state

pytestmark = [pytest.mark.django_db, pytest.mark.urls("django_sbert.urls")]

TOKEN = "monitoring-secret-0123456789"


@pytest.fixture(autouse=True)
def cold_process(settings) -> Iterator[None]:
    settings.SBERT = {**settings.SBERT, "HEALTH": {"TOKEN": TOKEN}}
    forget_warm_state()
    cache.clear()  # the throttle's counts
    yield
    forget_warm_state()
    cache.clear()


def test_an_anonymous_caller_gets_the_status_only(client):
    response = client.get("/health/")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable"}
    text = response.content.decode()
    assert serving.serving_version("default") not in text and "pid" not in text
    assert str(os.getpid()) not in text and "database" not in text


def test_staff_and_the_token_read_every_reason(client):
    version = serving.serving_version("default")
    staff = User.objects.create_user("operator", is_staff=True)
    client.force_login(staff)
    body = client.get("/health/").json()
    assert body["status"] == "unavailable" and body["pid"] == os.getpid()
    assert body["checks"]["database:default"] == "ok"
    assert body["checks"]["encoder:default"].startswith(f"serves {version}, not warmed")
    client.logout()

    response = client.get("/health/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 503
    assert response.json()["checks"]["encoder:default"].startswith(f"serves {version}")


@pytest.mark.parametrize(
    "authorization",
    ["Bearer wrong-token-0123456789", f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", "Bearer "],
)
def test_a_wrong_token_or_a_user_who_is_not_staff_gets_the_status_only(client, authorization):
    response = client.get("/health/", headers={"Authorization": authorization})
    assert response.status_code == 503 and response.json() == {"status": "unavailable"}
    client.force_login(User.objects.create_user("visitor"))
    response = client.get("/health/", headers={"Authorization": authorization})
    assert response.json() == {"status": "unavailable"}


def test_without_a_token_configured_no_header_opens_the_details(client, settings):
    settings.SBERT = {**settings.SBERT, "HEALTH": {"TOKEN": None}}
    response = client.get("/health/", headers={"Authorization": "Bearer None"})
    assert response.json() == {"status": "unavailable"}


def test_each_client_is_throttled_before_any_check_runs(
    client, settings, django_assert_num_queries
):
    settings.SBERT = {**settings.SBERT, "RATES": {"health": "3/minute"}}
    for _ in range(3):
        assert client.get("/health/").status_code == 503
    with django_assert_num_queries(0):  # no SELECT 1, no version read
        response = client.get("/health/")
    assert response.status_code == 429
    assert response.json() == {"status": "throttled"}
    assert 1 <= int(response["Retry-After"]) <= 60
    # Another address has a count of its own.
    assert client.get("/health/", REMOTE_ADDR="10.0.0.9").status_code == 503
