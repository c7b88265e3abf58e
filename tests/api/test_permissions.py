"""Permission matrix: every endpoint and method, for each role, under each permission setup.

Roles: anonymous, user (no permissions), staff (is_staff, no model permissions), staff_viewer
(is_staff and testapp.view_article), viewer (a plain user granted testapp.view_article),
superuser. Anonymous refusals are 403 with DRF's
default authentication classes (SessionAuthentication first sends no WWW-Authenticate).
"""

from __future__ import annotations

import json

import pytest
from rest_framework.permissions import AllowAny, IsAdminUser, IsAuthenticated

from django_sbert.api.permissions import DjangoModelViewPermissions

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

ROLES = ("anonymous", "user", "staff", "staff_viewer", "viewer", "superuser")
DENIED = 403
# Roles allowed to read through search/ and similar/, per registration.
READERS = {
    "default (DRF's AllowAny)": (None, set(ROLES)),
    "AllowAny": ([AllowAny], set(ROLES)),
    "IsAuthenticated": ([IsAuthenticated], set(ROLES) - {"anonymous"}),
    "IsAdminUser": ([IsAdminUser], {"staff", "staff_viewer", "superuser"}),
    "DjangoModelViewPermissions": (
        [DjangoModelViewPermissions],
        {"viewer", "staff_viewer", "superuser"},
    ),
}
# Roles that may "write" under DjangoModelViewPermissions (add/change/delete permissions).
WRITERS = {"superuser"}


def _call(client, method: str, url: str):
    return getattr(client, method)(url)


@pytest.mark.parametrize("setup", list(READERS))
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("endpoint", ["search", "similar"])
def test_search_and_similar_matrix(client_as, articles, registered, setup, role, endpoint):
    classes, allowed = READERS[setup]
    registered(permission_classes=classes)
    client = client_as(role)
    if endpoint == "search":
        url = "/api/sbert/search/?model=testapp.article&q=dog"
    else:
        url = f"/api/sbert/similar/testapp.article/{articles[0].pk}/"
    get = client.get(url)
    assert get.status_code == (200 if role in allowed else DENIED), get.content
    for method in ("post", "put", "patch", "delete"):
        if role not in allowed:
            expected = DENIED
        elif setup == "DjangoModelViewPermissions" and role not in WRITERS:
            expected = DENIED  # the write permission is checked before the method
        else:
            expected = 405
        assert _call(client, method, url).status_code == expected, (method, role)


@pytest.mark.parametrize(
    ("setup", "classes", "allowed"),
    [
        ("default: IsAuthenticated", None, set(ROLES) - {"anonymous"}),
        (
            "IsAdminUser",
            ["rest_framework.permissions.IsAdminUser"],
            {"staff", "staff_viewer", "superuser"},
        ),
        ("AllowAny", ["rest_framework.permissions.AllowAny"], set(ROLES)),
    ],
)
@pytest.mark.parametrize("role", ROLES)
def test_embed_matrix(client_as, settings, setup, classes, allowed, role):
    if classes is not None:
        settings.SBERT = {**settings.SBERT, "API": {"PERMISSION_CLASSES": {"embed": classes}}}
    client = client_as(role)
    response = client.post(
        "/api/sbert/embed/", json.dumps({"texts": ["a dog"]}), content_type="application/json"
    )
    assert response.status_code == (200 if role in allowed else DENIED), response.content
    for method in ("get", "put", "patch", "delete"):
        expected = 405 if role in allowed else DENIED
        assert _call(client, method, "/api/sbert/embed/").status_code == expected, method


@pytest.mark.parametrize("role", ROLES)
def test_schema_is_public(client_as, registered, role):
    registered()
    assert client_as(role).get("/api/sbert/schema/", {"format": "json"}).status_code == 200


def test_denied_responses_leak_no_rows(client_as, articles, registered):
    registered(permission_classes=[IsAuthenticated])
    body = client_as("anonymous").get("/api/sbert/search/?model=testapp.article&q=dog").json()
    assert set(body) == {"detail"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/api/sbert/search/", 400),  # no model: its permissions cannot be known
        ("/api/sbert/search/?model=testapp.article", 200),
        ("/api/sbert/similar/testapp.article/1/", 200),
        ("/api/sbert/similar/auth.user/1/", 404),
        ("/api/sbert/embed/", 200),
    ],
)
def test_options_and_head(client_as, registered, url, expected):
    registered()
    client = client_as("user")
    assert client.options(url).status_code == expected
    if "embed" not in url:
        assert client.head(url).status_code < 500
