"""Property-based run over the OpenAPI schema: generated requests never get a 5xx.

Schemathesis reads schema/ and hypothesis generates requests from it (valid and invalid
parameters, bodies of every JSON type, path values of every shape); each goes through the real
WSGI stack, database and encoder. Every response must be below 500 and its status documented.
"""

from __future__ import annotations

import pytest

pytest.importorskip("drf_spectacular")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

from django_sbert.api.settings import APISettings  # noqa: E402

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

EXAMPLES_PER_OPERATION = 30
# Staff-only endpoints (fine-tuning, evaluations): their own modules test them with staff users.
STAFF_PREFIXES = (
    "/api/sbert/pairs/",
    "/api/sbert/training-runs/",
    "/api/sbert/encoder-versions/",
    "/api/sbert/evaluations/",
)


def _no_server_error(operation, documented: set[int], statuses: set[int], headers=None):
    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case):
        response = case.call(headers=headers)
        statuses.add(response.status_code)
        assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
        assert response.status_code in documented, (case.as_curl_command(), response.text)

    return check


@pytest.fixture
def wsgi_app():
    """Django's WSGI handler, without closing the test's database connection per request.

    Django's own test client does the same: request_started/finished would otherwise close
    the connection that holds the test's transaction.
    """
    from django.core.signals import request_finished, request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.heavy
def test_no_server_errors(articles, registered, settings, wsgi_app, monkeypatch):

    registered()
    settings.ALLOWED_HOSTS = ["*"]
    settings.SBERT = {
        **settings.SBERT,
        "API": {"PERMISSION_CLASSES": {"embed": ["rest_framework.permissions.AllowAny"]}},
        "SEARCH": {"MAX_QUERY_LENGTH": 200},
        # thousands of requests: no rate stops them
        "RATES": {"search": None, "suggest": None, "embed": None, "logging": None, "clicks": None},
        # searches logged, and events/ past its "logging is off" answer
        "FEEDBACK": {"LOG": True},
    }
    # keep each generated request cheap to encode
    monkeypatch.setattr(APISettings, "EMBED_MAX_TEXT_LENGTH", 200)
    schema = schemathesis.openapi.from_wsgi("/api/sbert/schema/?format=json", wsgi_app)
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if not result.ok().path.startswith(STAFF_PREFIXES)
    ]
    assert len(operations) == 5
    seen: dict[str, set[int]] = {}

    for operation in operations:
        documented = {int(code) for code in operation.definition.raw["responses"]}
        statuses = seen.setdefault(operation.label, set())

        check = _no_server_error(operation, documented, statuses)
        check()

    # The run reached the real work, not only the validation errors.
    assert 200 in seen["GET /api/sbert/search/"]
    assert 200 in seen["POST /api/sbert/embed/"]
    assert 200 in seen["GET /api/sbert/suggest/{model}/"]
    assert 400 in seen["POST /api/sbert/events/"]  # generated tokens are not signed


@pytest.mark.heavy
def test_no_server_errors_on_the_training_endpoints(settings, wsgi_app, tmp_path):
    """The same run over pairs/, training-runs/ and encoder-versions/, as a superuser.

    Requests authenticate with HTTP Basic (no CSRF token needed); generated bodies that are
    valid create pairs and queue runs (nothing executes them: on_commit never fires inside the
    test's transaction).
    """
    import base64

    from django.contrib.auth.models import User

    from django_sbert.models import EncoderVersion, TrainingPair, TrainingRun

    settings.ALLOWED_HOSTS = ["*"]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SBERT = {**settings.SBERT, "MODEL_DIR": str(tmp_path)}
    User.objects.create_superuser("fuzz", email=None, password="fuzz-password")
    pair = TrainingPair.objects.create(text_a="a cat", text_b="a dog")
    run = TrainingRun.objects.create(loss="mnrl", data={"train": [pair.pk]})
    EncoderVersion.objects.create(version="default:fuzz", run=run)
    token = base64.b64encode(b"fuzz:fuzz-password").decode()
    headers = {"Authorization": f"Basic {token}"}

    schema = schemathesis.openapi.from_wsgi("/api/sbert/schema/?format=json", wsgi_app)
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if result.ok().path.startswith(STAFF_PREFIXES)
    ]
    assert len(operations) == 14
    seen: dict[str, set[int]] = {}
    for operation in operations:
        documented = {int(code) for code in operation.definition.raw["responses"]}
        statuses = seen.setdefault(operation.label, set())
        _no_server_error(operation, documented, statuses, headers)()
    assert 201 in seen["POST /api/sbert/pairs/"]
    assert 200 in seen["GET /api/sbert/training-runs/"]


def test_credentials_with_a_nul_byte_are_refused_like_wrong_ones(articles, registered, client):
    """Django's ModelBackend looks the username up in PostgreSQL, which refuses text holding a
    NUL byte (DataError); such credentials name no user: refused as wrong credentials are
    (401, or 403 when the first authentication class sends no WWW-Authenticate), not a 500."""
    import base64

    registered()

    def search_as(credentials: bytes):
        token = base64.b64encode(credentials).decode()
        return client.get(
            "/api/sbert/search/", {"q": "budget"}, HTTP_AUTHORIZATION=f"Basic {token}"
        )

    wrong = search_as(b"nobody:secret")
    assert wrong.status_code in (401, 403)
    response = search_as(b"ad\x00min:secret")
    assert response.status_code == wrong.status_code, response.content
    assert response.json() == wrong.json() == {"detail": "Invalid username/password."}
