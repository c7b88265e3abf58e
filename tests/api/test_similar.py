"""GET similar/<app_label.model>/<pk>/: more like this, through the registered queryset."""

from __future__ import annotations

import pytest

from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]


def url(pk: object, model: str = "testapp.article") -> str:
    return f"/api/sbert/similar/{model}/{pk}/"


def test_neighbours_of_a_row_without_the_row_itself(api_client, articles, registered):
    registered()
    target = articles[0]
    response = api_client.get(url(target.pk), {"k": 4})
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    ids = [r["id"] for r in results]
    assert target.pk not in ids
    expected = list(Article.objects.similar_to(target, k=4).values_list("pk", flat=True))
    assert ids == expected
    assert [set(r) for r in results] == [{"id", "similarity", "object"}] * 4
    assert set(results[0]["object"]) == {"id", "title", "category"}


def test_pages_split_the_top_k(api_client, articles, registered):
    registered()
    first = api_client.get(url(articles[1].pk), {"k": 3, "page_size": 2}).json()
    second = api_client.get(url(articles[1].pk), {"k": 3, "page_size": 2, "page": 2}).json()
    assert first["count"] == second["count"] == 3
    assert len(first["results"]) + len(second["results"]) == 3


def test_only_rows_of_the_registered_queryset(api_client, articles, registered):
    registered(queryset=lambda request: Article.objects.filter(published=True))
    hidden = articles[-1]
    assert api_client.get(url(hidden.pk)).status_code == 404  # not visible: as if absent
    ids = [r["id"] for r in api_client.get(url(articles[0].pk), {"k": 20}).json()["results"]]
    assert hidden.pk not in ids
    assert len(ids) == len(articles) - 2


@pytest.mark.parametrize("pk", ["999999", "abc", "1.5", "9" * 30, "-1", "%20"])
def test_unknown_or_malformed_pk_is_404(api_client, articles, registered, pk):
    registered()
    assert api_client.get(url(pk)).status_code == 404


def test_unknown_model_is_404_with_a_message(api_client, articles, registered):
    registered()
    response = api_client.get(url(articles[0].pk, model="auth.user"))
    assert response.status_code == 404
    assert response.json() == {"detail": "Unknown model 'auth.user'."}
    assert "testapp.article" not in response.content.decode()  # not for this client to see


def test_unknown_model_lists_the_registered_models_to_staff(client_as, articles, registered):
    registered()
    response = client_as("staff").get(url(articles[0].pk, model="auth.user"))
    assert response.status_code == 404
    assert "Searchable models: testapp.article." in response.json()["detail"]


def test_row_without_embedding_is_409(api_client, articles, registered):
    registered()
    fresh = Article.objects.create(title="not indexed yet")
    response = api_client.get(url(fresh.pk))
    assert response.status_code == 409
    assert "no embedding yet" in response.json()["detail"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"k": "0"}, "k"),
        ({"k": "x"}, "k"),
        ({"k": "1000"}, "k"),
        ({"min_similarity": "-2"}, "min_similarity"),
        ({"field": "nope"}, "field"),
    ],
)
def test_bad_parameters_are_400(api_client, articles, registered, params, field):
    registered()
    response = api_client.get(url(articles[0].pk), params)
    assert response.status_code == 400
    assert field in response.json()


def test_object_permissions_are_checked(client_as, articles, registered):
    from rest_framework.permissions import BasePermission

    class OnlyEconomy(BasePermission):
        message = "Only economy articles may be compared."

        def has_object_permission(self, request, view, obj):
            return obj.category == "economy"

    registered(permission_classes=[OnlyEconomy])
    api_client = client_as("user")
    assert api_client.get(url(articles[0].pk)).status_code == 200
    denied = api_client.get(url(articles[3].pk))
    assert denied.status_code == 403
    assert denied.json()["detail"] == "Only economy articles may be compared."
