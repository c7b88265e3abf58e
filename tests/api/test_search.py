"""GET search/: results, ranking, pagination, visibility and every kind of bad input."""

from __future__ import annotations

import pytest

from django_sbert.api.settings import APISettings
from django_sbert.api.views import SemanticResultsView
from django_sbert.query import options
from tests.api.conftest import plant
from tests.testapp.models import Article

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.urls")]

URL = "/api/sbert/search/"


def search(client, **params):
    return client.get(URL, {"model": "testapp.article", **params})


def test_results_are_ranked_and_show_only_registered_fields(api_client, articles, registered):
    registered()
    target = articles[3]
    plant(target, "a cat and a dog")
    response = search(api_client, q="a cat and a dog", k=5)
    assert response.status_code == 200, response.json()
    body = response.json()
    results = body["results"]
    assert len(results) == 5
    assert results[0]["id"] == target.pk
    assert results[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
    similarities = [r["similarity"] for r in results]
    assert similarities == sorted(similarities, reverse=True)
    assert all(-1.0 <= s <= 1.0 + 1e-6 for s in similarities)
    for result in results:
        assert set(result) == {"id", "similarity", "object"}
        assert set(result["object"]) == {"id", "title", "category"}  # never body, never vectors
    assert results[0]["object"] == {"id": target.pk, "title": target.title, "category": "pets"}


def test_ranking_matches_similar_to(api_client, articles, registered):
    registered()
    response = search(api_client, q="interest rates and money", k=8, page_size=8)
    expected = list(
        Article.objects.similar_to("interest rates and money", k=8).values_list("pk", flat=True)
    )
    assert [r["id"] for r in response.json()["results"]] == expected


def test_default_k_and_page_size(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "SEARCH": {"K": 3}}
    body = search(api_client, q="dog").json()
    assert body["count"] == 3
    assert len(body["results"]) == 3


def test_k_is_the_total_and_pages_split_it(api_client, articles, registered):
    registered()
    whole = search(api_client, q="the dog and the cat", k=5, page_size=5).json()
    assert whole["count"] == 5
    assert whole["next"] is None
    pages = [
        search(api_client, q="the dog and the cat", k=5, page_size=2, page=n).json()
        for n in (1, 2, 3)
    ]
    assert [p["count"] for p in pages] == [5, 5, 5]
    assert [len(p["results"]) for p in pages] == [2, 2, 1]
    assert pages[0]["next"] and pages[0]["previous"] is None
    assert pages[2]["next"] is None
    ids = [r["id"] for page in pages for r in page["results"]]
    assert ids == [r["id"] for r in whole["results"]]  # one ranking, no repeats, no gaps
    beyond = search(api_client, q="the dog and the cat", k=5, page_size=2, page=4)
    assert beyond.status_code == 404


def test_page_size_is_capped(api_client, articles, registered, monkeypatch):
    registered()
    monkeypatch.setattr(APISettings, "MAX_PAGE_SIZE", 2)
    body = search(api_client, q="dog", k=6, page_size=50).json()
    assert len(body["results"]) == 2
    assert body["count"] == 6


def test_min_similarity(api_client, articles, registered):
    registered()
    target = articles[5]
    plant(target, "guitar music")
    body = search(api_client, q="guitar music", min_similarity=0.9999).json()
    assert [r["id"] for r in body["results"]] == [target.pk]
    blank = search(api_client, q="guitar music", min_similarity="")  # "not given"
    assert blank.status_code == 200
    assert blank.json()["count"] == 8


def test_rows_without_embedding_are_left_out(api_client, articles, registered):
    registered()
    fresh = Article.objects.create(title="Cats and dogs", body="A cat plays with a dog.")
    body = search(api_client, q="cats and dogs", k=20).json()
    ids = [r["id"] for r in body["results"]]
    assert fresh.pk not in ids
    assert len(ids) == len(articles)


def test_queryset_callable_limits_what_each_request_sees(api_client, articles, registered):
    seen = []

    def visible(request):
        seen.append(request)
        return Article.objects.filter(published=True)

    registered(queryset=visible)
    hidden = articles[-1]
    plant(hidden, "court and law")
    body = search(api_client, q="court and law", k=20).json()
    assert hidden.pk not in [r["id"] for r in body["results"]]
    assert body["count"] == len(articles) - 1
    assert seen and seen[0].method == "GET"


def test_queryset_may_be_a_queryset(api_client, articles, registered):
    registered(queryset=Article.objects.filter(category="economy"))
    body = search(api_client, q="dog", k=20).json()
    assert {r["object"]["category"] for r in body["results"]} == {"economy"}


def test_custom_serializer_class(api_client, articles, registered):
    from rest_framework import serializers

    class Short(serializers.Serializer):
        headline = serializers.CharField(source="title")

    registered(serializer_class=Short)
    body = search(api_client, q="dog", k=1).json()
    assert set(body["results"][0]["object"]) == {"headline"}


def test_model_label_is_case_insensitive(api_client, articles, registered):
    registered()
    response = api_client.get(URL, {"model": "testapp.Article", "q": "dog"})
    assert response.status_code == 200


def test_without_pagination_results_is_the_whole_top_k(
    api_client, articles, registered, monkeypatch
):
    registered()
    monkeypatch.setattr(SemanticResultsView, "pagination_class", None)  # a subclass's choice
    body = search(api_client, q="dog", k=4).json()
    assert set(body) == {"results"}
    assert len(body["results"]) == 4


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"q": "dog"}, "model", "Pass ?model=app_label.model_name"),
        ({"model": "", "q": "dog"}, "model", "Pass ?model="),
        ({"model": "testapp.nope", "q": "dog"}, "model", "Unknown model 'testapp.nope'"),
        ({"model": "auth.user", "q": "dog"}, "model", "Unknown model 'auth.user'."),
        ({"model": "testapp.author", "q": "dog"}, "model", "Unknown model"),
        ({"model": "testapp.article"}, "q", "Pass the search text"),
        ({"model": "testapp.article", "q": ""}, "q", "is empty"),
        ({"model": "testapp.article", "q": "   "}, "q", "is empty"),
        ({"model": "testapp.article", "q": "x" * 1001}, "q", "longer than 1000 characters"),
        ({"model": "testapp.article", "q": "a\x00b"}, "q", "Null characters"),
        ({"model": "testapp.article", "q": "dog", "k": "0"}, "k", "greater than or equal to 1"),
        ({"model": "testapp.article", "q": "dog", "k": "-3"}, "k", "greater than or equal to 1"),
        ({"model": "testapp.article", "q": "dog", "k": "101"}, "k", "at most 100"),
        ({"model": "testapp.article", "q": "dog", "k": "abc"}, "k", "valid integer"),
        ({"model": "testapp.article", "q": "dog", "k": "1.5"}, "k", "valid integer"),
        ({"model": "testapp.article", "q": "dog", "k": "9" * 40}, "k", "at most 100"),
        (
            {"model": "testapp.article", "q": "dog", "min_similarity": "x"},
            "min_similarity",
            "valid number",
        ),
        (
            {"model": "testapp.article", "q": "dog", "min_similarity": "nan"},
            "min_similarity",
            "valid number",
        ),
        (
            {"model": "testapp.article", "q": "dog", "min_similarity": "inf"},
            "min_similarity",
            "valid number",
        ),
        (
            {"model": "testapp.article", "q": "dog", "min_similarity": "1.5"},
            "min_similarity",
            "less than or equal to 1",
        ),
        (
            {"model": "testapp.article", "q": "dog", "field": "title"},
            "field",
            "Unknown EmbeddingField 'title'",
        ),
    ],
)
def test_bad_parameters_are_400_with_a_message(
    api_client, articles, registered, params, field, message
):
    registered()
    response = api_client.get(URL, params)
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert isinstance(errors[field], list), errors  # each parameter maps to its messages
    assert message in " ".join(errors[field])


@pytest.mark.parametrize("params", [{"model": "auth.user"}, {"model": ""}, {}])
@pytest.mark.parametrize("role", ["anonymous", "user", "viewer"])
def test_unknown_model_does_not_list_the_registered_models(
    client_as, articles, registered, caplog, params, role
):
    """A client that may search nothing must not learn which models exist."""
    registered()
    with caplog.at_level("WARNING", logger="django_sbert.api.views"):
        response = client_as(role).get(URL, {**params, "q": "dog"})
    assert response.status_code == 400
    assert "testapp.article" not in response.content.decode()
    assert "Searchable models" not in response.content.decode()
    if params.get("model"):
        assert response.json() == {"model": ["Unknown model 'auth.user'."]}
        # The developer still finds the list in the log.
        assert "'auth.user'" in caplog.text
        assert "searchable models: testapp.article" in caplog.text


@pytest.mark.parametrize("params", [{"model": "auth.user"}, {}])
def test_unknown_model_lists_the_registered_models_to_staff(
    client_as, articles, registered, params
):
    registered()
    response = client_as("staff").get(URL, {**params, "q": "dog"})
    assert response.status_code == 400
    (message,) = response.json()["model"]  # a list of messages, as for every parameter
    assert "Searchable models: testapp.article." in message


def test_query_length_limit_is_a_setting(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "SEARCH": {"MAX_QUERY_LENGTH": 5}}
    assert search(api_client, q="dogs!").status_code == 200
    response = search(api_client, q="dogs!!")
    assert response.status_code == 400
    assert "longer than 5 characters" in response.json()["q"][0]


def test_max_k_is_a_setting(api_client, articles, registered, settings):
    registered()
    settings.SBERT = {**settings.SBERT, "API": {"MAX_K": 3}}
    assert search(api_client, q="dog", k=3).status_code == 200
    assert "at most 3" in search(api_client, q="dog", k=4).json()["k"][0]


def test_bad_page_is_404(api_client, articles, registered):
    registered()
    assert search(api_client, q="dog", page="abc").status_code == 404
    assert search(api_client, q="dog", page="0").status_code == 404


def test_unsafe_methods_are_405(api_client, articles, registered):
    registered()
    for method in ("post", "put", "patch", "delete"):
        response = getattr(api_client, method)(URL + "?model=testapp.article&q=dog")
        assert response.status_code == 405, method


def test_keyword_mode_ranks_at_most_keyword_max_rows(api_client, articles, registered, monkeypatch):
    """mode=keyword on a word most rows hold ranks at most query.options.KEYWORD_MAX_ROWS
    of them (issue 14, item 9): the capped sub-select is in the statement, and no more rows
    than the cap come back even when k asks for more."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    registered()
    Article.objects.bulk_create(
        Article(title=f"market report {n}", body="the market is open", category="economy")
        for n in range(12)
    )
    monkeypatch.setattr(options, "KEYWORD_MAX_ROWS", 4)
    with CaptureQueriesContext(connection) as ctx:
        response = search(api_client, q="market", mode="keyword", k=10, page_size=10)
    assert response.status_code == 200, response.json()
    assert len(response.json()["results"]) == 4
    # BM25 (bm25.py): the rows of each word found in a capped sub-select of their own
    statement = next(q["sql"] for q in ctx.captured_queries if "array_positions" in q["sql"])
    assert "= ANY(ARRAY(SELECT" in statement and "LIMIT 4) AS c (pk)" in statement
    monkeypatch.undo()
    assert len(search(api_client, q="market", mode="keyword", k=10).json()["results"]) == 10


def test_unknown_model_warnings_are_throttled_first(
    client_as, articles, registered, settings, caplog
):
    """Unknown models are logged only for requests within the client's rate: an anonymous
    client cannot write a warning per request into the site's log."""
    registered()
    settings.SBERT = {**settings.SBERT, "RATES": {"search": "2/minute"}}
    client = client_as("anonymous")
    with caplog.at_level("WARNING", logger="django_sbert.api.views"):
        answers = [
            client.get(URL, {"model": f"spam.model{i}", "q": "dog"}, REMOTE_ADDR="10.9.9.9")
            for i in range(6)
        ]
        similar = client.get("/api/sbert/similar/spam.model/1/", REMOTE_ADDR="10.9.9.9")
    assert [a.status_code for a in answers] == [400, 400, 429, 429, 429, 429]
    assert similar.status_code == 429
    warnings = [r for r in caplog.records if "unknown model" in r.getMessage()]
    assert len(warnings) == 2
