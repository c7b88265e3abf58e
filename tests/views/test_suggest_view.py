"""SuggestView: search-as-you-type as JSON without Django REST framework."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_sbert.exceptions import SearchTimeout, VersionUnavailable
from tests.api.conftest import plant
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.views.suggest_urls")]


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()["results"]


def test_prefix_of_the_last_word(client, articles):
    found = results(client.get("/suggest/", {"q": "guit"}))
    assert found[0] == {"id": articles[5].pk, "label": "guitar music", "url": None}


def test_blends_in_rows_found_by_meaning(client, articles):
    plant(articles[2], "zebra quantum")
    found = results(client.get("/suggest/", {"q": "zebra quantum"}))
    assert found[0]["id"] == articles[2].pk
    expected = [s.pk for s in Article.objects.suggest("zebra quantum")]
    assert [r["id"] for r in found] == expected


def test_queryset_and_fields(client, articles):
    hidden = articles[-1]
    plant(hidden, "court and law")
    found = results(client.get("/published/", {"q": "court and law", "k": 20}))
    assert hidden.pk not in [r["id"] for r in found]
    assert found and all(set(r) == {"id", "label", "url", "category", "published"} for r in found)
    assert hidden.pk not in [r["id"] for r in results(client.get("/published/", {"q": "cou"}))]


def test_k(client, articles):
    assert len(results(client.get("/suggest/", {"q": "the dog"}))) == 5  # SEARCH["SUGGEST"]["K"]
    assert len(results(client.get("/suggest/", {"q": "the dog", "k": 2}))) == 2
    assert len(results(client.get("/three/", {"q": "the dog"}))) == 3  # the view's own k
    for bad in ("0", "21", "x", "-1", "1.5"):
        response = client.get("/suggest/", {"q": "the dog", "k": bad})
        assert response.status_code == 400 and "k must be" in response.json()["error"], bad
    assert client.get("/three/", {"q": "dog", "k": 5}).status_code == 400  # max_k 4


def test_empty_short_and_overlong_q(client, articles):
    assert results(client.get("/suggest/")) == []
    assert results(client.get("/suggest/", {"q": ""})) == []
    assert results(client.get("/suggest/", {"q": "d"})) == []
    assert client.get("/suggest/", {"q": "a " * 100}).status_code == 200
    long = client.get("/suggest/", {"q": "a" * 201})
    assert long.status_code == 400 and "longer than 200" in long.json()["error"]
    assert client.get("/suggest/", {"q": "dog\x00"}).status_code == 400
    for text in ["a & b | !c:* (", "'", "\\", "x_y"]:
        assert client.get("/suggest/", {"q": text}).status_code == 200


def test_get_only(client, articles):
    assert client.post("/suggest/", {"q": "dog"}).status_code == 405


def test_a_search_timeout_is_503(client, articles, monkeypatch):
    def timed_out(*args, **kwargs):
        raise SearchTimeout("cancelled", seconds=5)

    monkeypatch.setattr("django_sbert.views.suggest.suggest", timed_out)
    response = client.get("/suggest/", {"q": "dog"})
    assert response.status_code == 503 and response["Retry-After"]


def test_a_503_names_nothing_of_the_server_but_a_request_id_in_the_log(
    client, articles, monkeypatch, caplog
):
    inside = "/srv/models/default/ab12 (FileSystemStorage): sha256 0f3a... differs"

    def away(*args, **kwargs):
        raise VersionUnavailable(inside)

    monkeypatch.setattr("django_sbert.views.suggest.suggest", away)
    response = client.get("/suggest/", {"q": "dog"})
    assert response.status_code == 503
    body = response.json()
    assert "/srv/models" not in response.content.decode() and "sha256" not in body["error"]
    logged = [r.getMessage() for r in caplog.records if body["request_id"] in r.getMessage()]
    assert len(logged) == 1 and inside in logged[0]


def test_misconfigured_views_say_what_to_do(client, articles):
    with pytest.raises(ImproperlyConfigured, match="needs a model or a queryset"):
        client.get("/unconfigured/", {"q": "dog"})
    with pytest.raises(ImproperlyConfigured, match="vectors are not for display"):
        client.get("/vectors/", {"q": "dog"})


def test_exported_where_the_docs_say():
    from django_sbert import views
    from django_sbert.views.suggest import SuggestView

    assert views.SuggestView is SuggestView
