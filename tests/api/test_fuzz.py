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

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

EXAMPLES_PER_OPERATION = 30


def _no_server_error(operation, documented: set[int], statuses: set[int]):
    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case):
        response = case.call()
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


def test_no_server_errors(articles, registered, settings, wsgi_app):

    registered()
    settings.ALLOWED_HOSTS = ["*"]
    settings.SBERT = {
        **settings.SBERT,
        "API": {
            "THROTTLE_RATES": {"search": None, "embed": None},  # thousands of requests
            "EMBED_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
            "MAX_QUERY_LENGTH": 200,
            "EMBED_MAX_TEXT_LENGTH": 200,  # keep each generated request cheap to encode
        },
    }
    schema = schemathesis.openapi.from_wsgi("/api/sbert/schema/?format=json", wsgi_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 3
    seen: dict[str, set[int]] = {}

    for operation in operations:
        documented = {int(code) for code in operation.definition.raw["responses"]}
        statuses = seen.setdefault(operation.label, set())

        check = _no_server_error(operation, documented, statuses)
        check()

    # The run reached the real work, not only the validation errors.
    assert 200 in seen["GET /api/sbert/search/"]
    assert 200 in seen["POST /api/sbert/embed/"]
