"""schema/: the OpenAPI 3 document of the sbert endpoints (drf-spectacular)."""

from __future__ import annotations

import pytest

pytest.importorskip("drf_spectacular")

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]


@pytest.fixture
def schema(api_client, registered):
    registered()
    response = api_client.get("/api/sbert/schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def _parameters(operation):
    return {p["name"]: p for p in operation["parameters"]}


def test_documents_the_sbert_endpoints_only(schema):
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        "/api/sbert/search/",
        "/api/sbert/similar/{model}/{pk}/",
        "/api/sbert/suggest/{model}/",
        "/api/sbert/embed/",
        "/api/sbert/events/",
        "/api/sbert/evaluations/",
        "/api/sbert/pairs/",
        "/api/sbert/pairs/{pk}/",
        "/api/sbert/training-runs/",
        "/api/sbert/training-runs/{pk}/",
        "/api/sbert/training-runs/{pk}/cancel/",
        "/api/sbert/encoder-versions/",
        "/api/sbert/encoder-versions/{pk}/",
        "/api/sbert/encoder-versions/{pk}/promote/",
        "/api/sbert/encoder-versions/{pk}/rollback/",
    }


def test_suggest_documents_its_parameters_and_errors(schema):
    operation = schema["paths"]["/api/sbert/suggest/{model}/"]["get"]
    assert {"model", "q", "k", "field"} <= set(_parameters(operation))
    assert {"200", "400", "404", "429"} <= set(operation["responses"])


def test_training_endpoints_document_their_errors(schema):
    paths = schema["paths"]
    assert {"201", "400", "403", "409"} <= set(
        paths["/api/sbert/training-runs/"]["post"]["responses"]
    )
    promote = paths["/api/sbert/encoder-versions/{pk}/promote/"]["post"]
    assert {"202", "403", "404", "409"} <= set(promote["responses"])
    assert "gate" in promote["responses"]["409"]["description"]
    assert {"204", "403", "404"} <= set(paths["/api/sbert/pairs/{pk}/"]["delete"]["responses"])


def test_search_parameters_and_errors(schema):
    operation = schema["paths"]["/api/sbert/search/"]["get"]
    params = _parameters(operation)
    assert {"model", "q", "k", "min_similarity", "field", "page", "page_size"} <= set(params)
    assert params["model"]["required"] and params["q"]["required"]
    assert params["k"]["schema"]["minimum"] == 1
    assert params["k"]["schema"]["maximum"] == 100
    assert {"200", "400", "403", "404", "429"} <= set(operation["responses"])


def test_events_and_the_logged_search_fields(schema):
    events = schema["paths"]["/api/sbert/events/"]["post"]
    assert {"202", "400", "404", "410", "429"} <= set(events["responses"])
    body = events["requestBody"]["content"]
    assert {"application/json", "application/x-www-form-urlencoded"} <= set(body)
    components = schema["components"]["schemas"]
    for result in ("SearchResult", "HybridResult", "KeywordResult"):
        assert "click_token" in components[result]["properties"]
    assert "search_id" in components["SemanticSearchResponse"]["properties"]


def test_similar_and_embed(schema):
    similar = schema["paths"]["/api/sbert/similar/{model}/{pk}/"]["get"]
    assert {"model", "pk", "k"} <= set(_parameters(similar))
    assert "409" in similar["responses"]
    embed = schema["paths"]["/api/sbert/embed/"]["post"]
    assert {"200", "400", "403", "413", "415", "429"} <= set(embed["responses"])
    body = embed["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[1]]
    assert request["required"] == ["texts"]
    assert request["properties"]["texts"]["maxItems"] == 64
    assert request["additionalProperties"] is False


def test_schema_is_throttled(api_client, settings):
    settings.SBERT = {**settings.SBERT, "RATES": {"schema": "1/minute"}}
    assert api_client.get("/api/sbert/schema/", REMOTE_ADDR="10.0.0.1").status_code == 200
    throttled = api_client.get("/api/sbert/schema/", REMOTE_ADDR="10.0.0.1")
    assert throttled.status_code == 429
    assert int(throttled["Retry-After"]) > 0
    settings.SBERT = {**settings.SBERT, "RATES": {"schema": None}}
    assert api_client.get("/api/sbert/schema/", REMOTE_ADDR="10.0.0.1").status_code == 200


def test_schema_is_open_by_default(api_client):
    assert api_client.get("/api/sbert/schema/").status_code == 200


def test_schema_permission_classes_restrict_it(client_as, settings):
    api = {"PERMISSION_CLASSES": {"schema": ["rest_framework.permissions.IsAdminUser"]}}
    settings.SBERT = {**settings.SBERT, "API": api}
    for role in ("anonymous", "user"):
        response = client_as(role).get("/api/sbert/schema/", {"format": "json"})
        assert response.status_code == 403, role
        assert "openapi" not in response.content.decode()
    assert client_as("staff").get("/api/sbert/schema/", {"format": "json"}).status_code == 200


def test_filter_backend_documents_its_parameter():
    from django_sbert.api.filters import SemanticSearchFilter
    from tests.api.views import ArticleViewSet

    [param] = SemanticSearchFilter().get_schema_operation_parameters(ArticleViewSet())
    assert param["name"] == "semantic"
    assert param["in"] == "query"


def test_schema_lists_only_the_models_a_client_may_search(client_as, registered):
    """The model parameter's enum is the list an unknown model's answer withholds: a client
    sees the labels of the models it may search, staff all of them."""
    from rest_framework.permissions import AllowAny

    from django_sbert.api import registry
    from django_sbert.api.permissions import DjangoModelViewPermissions
    from tests.testapp.models import Note

    registered(permission_classes=[DjangoModelViewPermissions])
    registry.register(Note, fields=["id", "text"], permission_classes=[AllowAny])

    def labels(role):
        response = client_as(role).get("/api/sbert/schema/", {"format": "json"})
        assert response.status_code == 200
        search = response.json()["paths"]["/api/sbert/search/"]["get"]
        return _parameters(search)["model"]["schema"].get("enum"), response.content.decode()

    for role in ("anonymous", "user"):
        enum, text = labels(role)
        assert enum == ["testapp.note"], role
        assert "testapp.article" not in text, role
    assert labels("viewer")[0] == ["testapp.article", "testapp.note"]
    assert labels("staff")[0] == ["testapp.article", "testapp.note"]
